/* A native task runner, for bench/spawners.py's "native" option: what a C spawner and reaper
 * would save the worker, measured beside the Python ones.
 *
 * One thread owns every task process. The event loop submits a task (one call, no GIL needed)
 * and is woken through an eventfd when tasks have ended; it then collects the ended ones in a
 * batch. The thread makes the stdout/stderr memfds, spawns in a new session with SIGPIPE and
 * SIGXFSZ at their defaults (as knarr's spawner does), waits on the pidfds with one epoll,
 * sweeps the group and reaps the leader. The memfds go back to the loop, which reads them as
 * the engine does. Every task runs the same argv (given once): the bench measures the
 * mechanism, not argument passing.
 *
 *   cc -O2 -shared -fPIC -pthread -o native_runner.so native_runner.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct { int64_t id; int32_t status, out, err; } done_t;  /* status: wait status, or -errno */
typedef struct { int64_t id; int pid, pidfd, out, err; } job_t;

#define QUEUE 65536
#define REQUEST_TAG UINT64_MAX

static char **argv_;
static int epfd = -1, request_fd = -1, done_fd = -1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t requests[QUEUE];
static size_t req_head, req_tail;
static done_t done[QUEUE];
static size_t done_head, done_tail;
static posix_spawnattr_t attr;

static void finish(int64_t id, int status, int out, int err) {
    pthread_mutex_lock(&lock);
    done[done_tail++ % QUEUE] = (done_t){id, status, out, err};
    pthread_mutex_unlock(&lock);
}

static void start(int64_t id) {
    int out = memfd_create("knarr-stdout", MFD_CLOEXEC), err = memfd_create("knarr-stderr", MFD_CLOEXEC);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out, 1);
    posix_spawn_file_actions_adddup2(&actions, err, 2);
    pid_t pid;
    int code = posix_spawnp(&pid, argv_[0], &actions, &attr, argv_, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (code) {
        finish(id, -code, out, err);
        return;
    }
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    job_t *job = malloc(sizeof *job);
    *job = (job_t){id, pid, pidfd, out, err};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = job};
    epoll_ctl(epfd, EPOLL_CTL_ADD, pidfd, &ev);
}

static void *serve(void *unused) {
    (void)unused;
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, NULL);
    struct epoll_event events[64];
    for (;;) {
        int n = epoll_wait(epfd, events, 64, -1);
        int ended = 0;
        for (int i = 0; i < n; i++) {
            if (events[i].data.u64 == REQUEST_TAG) {
                uint64_t count;
                if (read(request_fd, &count, sizeof count) < 0) continue;
                for (;;) {
                    pthread_mutex_lock(&lock);
                    int have = req_head != req_tail;
                    int64_t id = have ? requests[req_head++ % QUEUE] : 0;
                    pthread_mutex_unlock(&lock);
                    if (!have) break;
                    start(id);
                }
                continue;
            }
            job_t *job = events[i].data.ptr;
            int status = 0;
            kill(-job->pid, SIGKILL);  /* the group's stragglers */
            waitpid(job->pid, &status, 0);
            /* Deregister before closing: a child that has not finished its exec yet still holds a
             * copy of this descriptor, and epoll drops an entry only with the file's last one. */
            epoll_ctl(epfd, EPOLL_CTL_DEL, job->pidfd, NULL);
            close(job->pidfd);
            finish(job->id, status, job->out, job->err);
            free(job);
            ended++;
        }
        pthread_mutex_lock(&lock);
        int pending = done_head != done_tail;
        pthread_mutex_unlock(&lock);
        if (ended || pending) {
            uint64_t one = 1;
            if (write(done_fd, &one, sizeof one) < 0) { /* the loop is gone */ }
        }
    }
    return NULL;
}

/* Start the runner for tasks running argv (once per process; later calls return the same
 * eventfd); returns the eventfd the loop waits on, or -errno. */
int runner_start(char **argv) {
    if (done_fd >= 0) return done_fd;
    argv_ = argv;
    posix_spawnattr_init(&attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGXFSZ);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    request_fd = eventfd(0, EFD_CLOEXEC);
    done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epfd < 0 || request_fd < 0 || done_fd < 0) return -errno;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = REQUEST_TAG};
    epoll_ctl(epfd, EPOLL_CTL_ADD, request_fd, &ev);
    pthread_t thread;
    int code = pthread_create(&thread, NULL, serve, NULL);
    if (code) return -code;
    pthread_detach(thread);
    return done_fd;
}

void runner_submit(int64_t id) {
    pthread_mutex_lock(&lock);
    requests[req_tail++ % QUEUE] = id;
    pthread_mutex_unlock(&lock);
    uint64_t one = 1;
    if (write(request_fd, &one, sizeof one) < 0) { /* cannot happen short of a closed eventfd */ }
}

/* Move up to max ended tasks into out; returns how many. */
int runner_collect(done_t *out, int max) {
    uint64_t count;
    if (read(done_fd, &count, sizeof count) < 0) { /* nothing signalled: collect anyway */ }
    int n = 0;
    pthread_mutex_lock(&lock);
    while (n < max && done_head != done_tail) out[n++] = done[done_head++ % QUEUE];
    pthread_mutex_unlock(&lock);
    return n;
}
