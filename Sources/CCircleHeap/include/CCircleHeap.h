#ifndef C_CIRCLE_HEAP_H
#define C_CIRCLE_HEAP_H

#include <stddef.h>

// The C allocator's view of the heap. Swift's Glibc module does not export <malloc.h>, so the
// two calls the server needs (mallinfo2 and malloc_trim) are wrapped here.

/// What the allocator holds for the process, from glibc's mallinfo2().
typedef struct {
    /// Bytes the allocator holds free in its arenas (not returned to the kernel).
    size_t freeBytes;
    /// 1 where the allocator can report these (glibc on Linux); 0 elsewhere, with the count 0.
    int supported;
} circle_heap_stats;

/// Reads the allocator's counts. Walks every arena's free lists: call it seldom (once a second
/// is cheap), not per request.
circle_heap_stats circle_heap_read(void);

/// Returns the allocator's free pages to the kernel (glibc's malloc_trim(0)): 1 if some memory
/// was returned, 0 if none could be, -1 where the allocator has no such call.
int circle_heap_trim(void);

#endif
