#ifndef C_CIRCLE_CPU_H
#define C_CIRCLE_CPU_H

// Swift's Glibc module is built without _GNU_SOURCE, so it does not export sched_getaffinity
// and CPU_COUNT; the one call the server needs is wrapped here.

/// How many CPUs this process may run on (its CPU affinity: taskset, systemd's CPUAffinity=),
/// or 0 where that cannot be read (not Linux, or more CPUs than a cpu_set_t holds).
int circle_cpu_affinity_count(void);

#endif
