/*
 * memprobe: an LD_PRELOAD helper for idle.py that lets the benchmark ask a running server how
 * much of its RSS is live heap. It changes nothing in the server until asked.
 *
 * Build: cc -O2 -shared -fPIC -o memprobe.so memprobe.c -lpthread
 * Use:   LD_PRELOAD=/path/memprobe.so MEMPROBE_OUT=/tmp/x.txt circle serve ...
 *        touch /tmp/x.txt.req   -> within 0.1 s the file is removed and one line is appended to MEMPROBE_OUT:
 *           "arena=<bytes> in_use=<bytes> free=<bytes> mmap=<bytes> trimmed_rss_kb=<kB>"
 *        in_use is glibc's mallinfo2 uordblks + hblkhd (live allocations, including mmapped
 *        blocks); after reading it the thread calls malloc_trim(0) and records VmRSS again.
 *
 * A dedicated thread polls for the request file every 100 ms (a signal would need a handler or a
 * mask that the Swift runtime and Dispatch do not disturb), so nothing runs in a signal handler.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmRSS:", 6) == 0) { kb = strtol(line + 6, NULL, 10); break; }
    }
    fclose(f);
    return kb;
}

static void *probe_thread(void *arg) {
    (void)arg;
    const char *path = getenv("MEMPROBE_OUT");
    char request[4096];
    if (!path || snprintf(request, sizeof request, "%s.req", path) >= (int)sizeof request) return NULL;
    for (;;) {
        usleep(100 * 1000);
        if (unlink(request) != 0) continue;
        struct mallinfo2 mi = mallinfo2();
        long before = rss_kb();
        malloc_trim(0);
        long after = rss_kb();
        FILE *out = fopen(path, "a");
        if (!out) continue;
        fprintf(out, "arena=%zu in_use=%zu free=%zu mmap=%zu rss_kb=%ld trimmed_rss_kb=%ld\n",
                mi.arena, mi.uordblks + mi.hblkhd, mi.fordblks, mi.hblkhd, before, after);
        fclose(out);
    }
    return NULL;
}

__attribute__((constructor)) static void memprobe_init(void) {
    pthread_t thread;
    if (!getenv("MEMPROBE_OUT")) return;
    if (pthread_create(&thread, NULL, probe_thread, NULL) == 0) pthread_detach(thread);
}
