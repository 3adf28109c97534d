/* The floor for spawning from any language on this machine: posix_spawn (vfork + exec)
 * of a binary in a new session, 4 children at a time, reaped with wait(); prints the
 * parent's CPU per spawn, the rate and the children's CPU per spawn (microseconds).
 * The children get this program's environment: run it with the one the spawns it stands beside
 * give their tasks (a LANG with a UTF-8 locale, for one, costs /bin/echo its locale's loading).
 * bench/spawn_floor.py compiles and runs it for make bench and the spawner bench.
 *
 *   cc -O2 -o spawn_floor spawn_floor.c && ./spawn_floor /bin/true 5000 4
 */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static double seconds(struct timeval tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s BINARY COUNT CONCURRENCY\n", argv[0]);
        return 2;
    }
    char *binary = argv[1];
    int count = atoi(argv[2]), concurrency = atoi(argv[3]);
    char *child_argv[] = {binary, NULL};
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);

    struct rusage before, after, children;
    struct timespec start, end;
    getrusage(RUSAGE_SELF, &before);
    clock_gettime(CLOCK_MONOTONIC, &start);
    int running = 0;
    for (int i = 0; i < count; i++) {
        pid_t pid;
        if (posix_spawn(&pid, binary, NULL, &attr, child_argv, environ) != 0) {
            perror("posix_spawn");
            return 1;
        }
        if (++running >= concurrency) {
            wait(NULL);
            running--;
        }
    }
    while (running-- > 0) wait(NULL);
    clock_gettime(CLOCK_MONOTONIC, &end);
    getrusage(RUSAGE_SELF, &after);
    getrusage(RUSAGE_CHILDREN, &children);  /* every child this program reaped: only those it spawned */

    double cpu = seconds(after.ru_utime) - seconds(before.ru_utime) + seconds(after.ru_stime) - seconds(before.ru_stime);
    double wall = (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9;
    double children_cpu = seconds(children.ru_utime) + seconds(children.ru_stime);
    printf("%.1f %.0f %.1f\n", cpu / count * 1e6, count / wall, children_cpu / count * 1e6);
    return 0;
}
