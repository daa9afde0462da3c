#include "CCircleHeap.h"

// <stdlib.h> brings in glibc's <features.h>, which defines __GLIBC__ (musl and Darwin do not).
#include <stdlib.h>

#if defined(__GLIBC__)
#include <malloc.h>

circle_heap_stats circle_heap_read(void) {
    circle_heap_stats stats = {0, 1};
#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33)
    struct mallinfo2 info = mallinfo2();
    stats.freeBytes = info.fordblks;
#else
    // mallinfo's int fields wrap past 2 GiB; good enough to see a burst's free memory.
    struct mallinfo info = mallinfo();
    stats.freeBytes = (size_t)(unsigned)info.fordblks;
#endif
    return stats;
}

int circle_heap_trim(void) {
    return malloc_trim(0);
}

#else

circle_heap_stats circle_heap_read(void) {
    circle_heap_stats stats = {0, 0};
    return stats;
}

int circle_heap_trim(void) {
    return -1;
}

#endif
