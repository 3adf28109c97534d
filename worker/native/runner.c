/* knarr's native task runner: starts task processes, waits for them and reaps them, off the
 * event loop and without the GIL (knarr/engine/native.py drives it through ctypes).
 *
 * One thread per runner owns every process it starts. The event loop submits a task (argv,
 * environment and the descriptors for stdin, stdout and stderr) and later collects one event
 * per task, in batches: an eventfd wakes the loop once for however many tasks ended meanwhile.
 * The thread also keeps a few stdout/stderr memfd pairs made ahead for the loop to take
 * (kr_take_pair), and closes the descriptors the loop is done with (kr_discard), so neither
 * costs the loop a system call. The thread spawns each task in a session of its own (so its
 * whole tree can be killed), with the signals kr_new was given (SIGPIPE, SIGXFSZ) at their
 * defaults and no signal blocked, then waits on the tasks' pidfds with one epoll. It spawns
 * as posix_spawnp does (clone with CLONE_VM | CLONE_VFORK, the PATH lookup, the same errors)
 * but on one stack mapped for good, and gets each pidfd from the clone itself. When a task's
 * leader exits, its group is swept with SIGKILL (the unreaped leader keeps the group's id
 * from being reused) and the leader is reaped.
 *
 * Slots. The loop's scheduler grants each task a slot (one of max_executors) or, when none is
 * free, a place in the runner's held queue. A task with a slot starts at once; a held one starts
 * when a running task ends and passes it its slot, here on the thread, without a round trip
 * through the loop (or when the loop passes one over, kr_pass). While tasks are held the loop
 * need not hurry for ended ones, so its wake-up waits for `batch` of them, HOLD_WAKE_MS at most.
 *
 * Every submitted task yields exactly one event: {id, pid, status, started_ns, slot}, status
 * being the wait status, or -errno when the spawn failed (-ECANCELED: killed before it started;
 * -ETIME: it expired while held), and slot what became of its slot (SLOT_*), which the loop's
 * scheduler mirrors.
 *
 * Locks: `jobs` covers the running list, each spawn from the clone until the process is
 * listed, each reap (and the start of the held task it passes its slot to), and kills; `queue`
 * covers submitted tasks not started yet (held or not), the events, the fresh memfd pairs and
 * the discarded descriptors. Whoever takes both takes `jobs` first.
 * Holding `jobs` (kr_pause) therefore means no task process exists that is not listed:
 * containment's sweep of detached orphans (containment.py) relies on it to leave the runner's
 * processes alone.
 *
 * Linux only (CLONE_PIDFD: 5.2 or later). Build: cc -O2 -shared -fPIC -pthread runner.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define KR_ABI 5 /* bump when a signature or kr_event_t changes: native.py checks it */
#define HOLD_WAKE_MS 3 /* the longest the thread holds back the loop's wake-up while it has held tasks to start */
#define FRESH_PAIRS 8    /* stdout/stderr memfd pairs the thread keeps made, ready for the next tasks */
#define DISCARD_WAKE 64  /* this many discarded descriptors wake the thread to close them */

typedef struct {
    int64_t id;
    int32_t pid;        /* 0 when it never started */
    int32_t status;     /* wait status, or -errno */
    int64_t started_ns; /* CLOCK_MONOTONIC when it was spawned, 0 when it never was */
    int32_t slot;       /* SLOT_FREED, SLOT_PASSED or SLOT_NONE */
    int32_t unused;
} kr_event_t;

/* kr_event_t.slot: what became of the slot the task had (native.py reads the same numbers). */
#define SLOT_FREED 0  /* free again */
#define SLOT_PASSED 1 /* taken by the next held task */
#define SLOT_NONE 2   /* it had none: it left the held queue unstarted (kr_kill) */

typedef struct job {
    int64_t id;
    const char *path;
    char *const *argv;
    char *const *envp; /* NULL: the worker's own environment */
    int in, out, err;  /* in < 0: /dev/null */
    int cancelled;
    int64_t expires_ns; /* held tasks: CLOCK_REALTIME after which they are dropped unstarted (0: never) */
    int64_t started_ns;
    int owner; /* the pool scheduler that granted its slot (kr_submit) */
    pid_t pid;
    int pidfd;
    struct job *next, *prev;
} job_t;

typedef struct {
    pthread_mutex_t jobs, queue;
    pthread_cond_t reaped;
    job_t *queued_head, *queued_tail, *running;
    job_t *held_head, *held_tail; /* under `queue`: tasks waiting for a running task's slot */
    int batch;                    /* ended tasks the loop's wake-up may wait for while tasks are held */
    kr_event_t *events;
    size_t n_events, cap_events;
    int signalled;
    int fresh[FRESH_PAIRS][2]; /* under `queue`: made by the thread, taken by the loop */
    int n_fresh;
    int *discarded; /* under `queue`: descriptors the loop is done with, for the thread to close */
    size_t n_discarded, cap_discarded;
    int epfd, wake_fd, done_fd;
    sigset_t defaults; /* what the tasks start with at their defaults */
    char *stack;       /* the children's, until they exec (spawns are one at a time) */
} runner_t;

static const char DEV_NULL[] = "/dev/null";

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000 /* Linux 5.2 */
#endif
#define STACK_BYTES (256 * 1024)

int kr_abi(void) { return KR_ABI; }

/* --- events (under `queue`) ------------------------------------------------------------- */
static void post(runner_t *r, const job_t *job, pid_t pid, int status, int slot) {
    pthread_mutex_lock(&r->queue);
    if (r->n_events == r->cap_events) {
        size_t cap = r->cap_events ? r->cap_events * 2 : 256;
        kr_event_t *grown = realloc(r->events, cap * sizeof *grown);
        while (!grown) { /* an event must never be lost: its task would wait forever */
            pthread_mutex_unlock(&r->queue);
            usleep(1000);
            pthread_mutex_lock(&r->queue);
            grown = realloc(r->events, cap * sizeof *grown);
        }
        r->events = grown;
        r->cap_events = cap;
    }
    r->events[r->n_events++] = (kr_event_t){job->id, (int32_t)pid, status, job->started_ns, slot, 0};
    pthread_mutex_unlock(&r->queue);
}

/* Wake the loop for the waiting events; returns 1 when it held the wake-up back instead. While
 * tasks are held, every slot a task frees goes straight to the next one, so the loop need not
 * hurry: it is woken once `batch` events wait (or HOLD_WAKE_MS has passed, or force). */
static int notify(runner_t *r, int force) {
    int held = 0;
    pthread_mutex_lock(&r->queue);
    if (r->n_events && !r->signalled) {
        if (!force && r->held_head && (int)r->n_events < r->batch) {
            held = 1;
        } else {
            uint64_t one = 1;
            if (write(r->done_fd, &one, sizeof one) == sizeof one) r->signalled = 1;
        }
    }
    pthread_mutex_unlock(&r->queue);
    return held;
}

/* --- the runner's thread (spawn and reap under `jobs`) ----------------------------------- */
static void unlist(runner_t *r, job_t *job) {
    if (job->prev) job->prev->next = job->next;
    else r->running = job->next;
    if (job->next) job->next->prev = job->prev;
}

static int64_t now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void reap_now(pid_t pid, int *status) {
    while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
    }
}

/* What the child needs, on the runner's side of the shared memory; `error` is its answer. */
typedef struct {
    const job_t *job;
    const runner_t *r;
    const char *search; /* PATH to search, or NULL when path names a file */
    volatile int error; /* errno of what failed in the child; 0 once it has exec'd */
} start_t;

static int open_at(int target, const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fd == target) return fd;
    int code = dup2(fd, target);
    close(fd);
    return code;
}

/* dup2 clears close-on-exec on the copy; a descriptor already in place needs it cleared by hand. */
static int place(int fd, int target) {
    if (fd == target) return fcntl(fd, F_SETFD, 0);
    return dup2(fd, target);
}

/* execve, looking the file up in search as posix_spawnp does (EACCES wins over a later ENOENT). */
static void exec_found(const char *file, char *const *argv, char *const *envp, const char *search) {
    if (!search) {
        execve(file, argv, envp);
        return;
    }
    char path[4096];
    size_t length = strlen(file);
    int denied = 0;
    for (const char *dir = search;; dir++) {
        const char *end = strchrnul(dir, ':');
        size_t size = (size_t)(end - dir);
        if (size + 1 + length + 1 <= sizeof path) {
            memcpy(path, dir, size);
            if (size) path[size++] = '/';
            memcpy(path + size, file, length + 1);
            execve(path, argv, envp);
            if (errno == EACCES) denied = 1;
            else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV && errno != ETIMEDOUT)
                return;
        } else {
            errno = ENAMETOOLONG;
        }
        if (!*end) break;
        dir = end;
    }
    if (denied) errno = EACCES;
}

/* The child, on the runner's memory and its spare stack until it execs: only async-signal-safe
 * calls, and every signal blocked (the runner's thread blocks them all) until the handlers the
 * interpreter installed are gone. */
static int child(void *arg) {
    start_t *s = arg;
    const job_t *job = s->job;
    struct sigaction dfl = {.sa_handler = SIG_DFL}, now;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        if (sigismember(&s->r->defaults, sig) == 1 ||
            (sigaction(sig, NULL, &now) == 0 && now.sa_handler != SIG_IGN && now.sa_handler != SIG_DFL))
            sigaction(sig, &dfl, NULL);
    }
    sigset_t none;
    sigemptyset(&none);
    if (setsid() < 0 || (job->in >= 0 ? place(job->in, 0) : open_at(0, DEV_NULL)) < 0 || place(job->out, 1) < 0 ||
        place(job->err, 2) < 0 || sigprocmask(SIG_SETMASK, &none, NULL) < 0)
        goto failed;
    exec_found(job->path, job->argv, job->envp ? job->envp : environ, s->search);
failed:
    s->error = errno ? errno : ENOEXEC;
    _exit(127);
}

/* Spawn the job (under `jobs`): 0 when it runs (listed), else the errno of what failed, with
 * *pid the child's when one was made (it has been killed and reaped). */
static int spawn(runner_t *r, job_t *job, pid_t *pid_out) {
    start_t start = {.job = job, .r = r, .search = NULL, .error = 0};
    *pid_out = 0;
    if (!strchr(job->path, '/')) {
        start.search = getenv("PATH");
        if (!start.search) start.search = "/bin:/usr/bin";
    }
    int pidfd = -1, status = 0;
    /* What posix_spawn does (the parent waits until the child has exec'd), but on a stack mapped
     * once rather than per spawn (unmapping it cost a TLB shootdown across CPUs each time), and
     * with the pidfd from the same call. */
    int64_t started = now_ns(CLOCK_MONOTONIC);
    pid_t pid = clone(child, r->stack + STACK_BYTES, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &start, &pidfd);
    if (pid < 0) return errno;
    if (start.error) {
        reap_now(pid, &status);
        close(pidfd);
        return start.error;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = job};
    if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, pidfd, &ev) < 0) {
        int failure = errno;
        kill(-pid, SIGKILL);
        reap_now(pid, &status);
        close(pidfd);
        *pid_out = pid;
        return failure;
    }
    job->pid = pid;
    job->pidfd = pidfd;
    job->started_ns = started;
    job->prev = NULL;
    job->next = r->running;
    if (r->running) r->running->prev = job;
    r->running = job;
    return 0;
}

static void release(runner_t *r, job_t *job, pid_t pid, int status);

/* The submitted and the held tasks are FIFO lists (under `queue`). */
static void push(job_t **head, job_t **tail, job_t *job) {
    job->next = NULL;
    if (*tail) (*tail)->next = job;
    else *head = job;
    *tail = job;
}

static job_t *pop(job_t **head, job_t **tail) {
    job_t *job = *head;
    if (job) {
        *head = job->next;
        if (!*head) *tail = NULL;
        job->next = NULL;
    }
    return job;
}

/* The first held job of owner (under `queue`), out of the held queue; NULL if it has none. A slot
 * only ever passes between tasks of one owner (one pool scheduler): two workers in one process
 * share the runner, not their slots. */
static void unlink_held(runner_t *r, job_t *before, job_t *job) {
    if (before) before->next = job->next;
    else r->held_head = job->next;
    if (r->held_tail == job) r->held_tail = before;
    job->next = NULL;
}

static job_t *take_held(runner_t *r, int owner) {
    for (job_t *job = r->held_head, *before = NULL; job; before = job, job = job->next) {
        if (job->owner == owner) {
            unlink_held(r, before, job);
            return job;
        }
    }
    return NULL;
}

static job_t *pop_held(runner_t *r, int owner) {
    pthread_mutex_lock(&r->queue);
    job_t *job = take_held(r, owner);
    pthread_mutex_unlock(&r->queue);
    return job;
}

/* Start a job that has a slot (under `jobs`); if it cannot run, its slot goes on (below). */
static void start(runner_t *r, job_t *job) {
    if (job->cancelled) {
        release(r, job, 0, -ECANCELED);
        return;
    }
    if (job->expires_ns && now_ns(CLOCK_REALTIME) >= job->expires_ns) {
        release(r, job, 0, -ETIME);
        return;
    }
    pid_t pid;
    int error = spawn(r, job, &pid);
    if (error) release(r, job, pid, -error);
}

/* The job has ended, or will never run, and lets go of its slot (under `jobs`): the next held
 * job takes the slot, and the job's event says so (SLOT_PASSED) or that the slot is free again
 * (SLOT_FREED). The job is freed. */
static void release(runner_t *r, job_t *job, pid_t pid, int status) {
    job_t *next = pop_held(r, job->owner);
    post(r, job, pid, status, next ? SLOT_PASSED : SLOT_FREED);
    free(job);
    if (next) start(r, next);
}

static void start_queued(runner_t *r) {
    for (;;) {
        pthread_mutex_lock(&r->jobs);
        pthread_mutex_lock(&r->queue);
        job_t *job = pop(&r->queued_head, &r->queued_tail);
        pthread_mutex_unlock(&r->queue);
        if (!job) {
            pthread_mutex_unlock(&r->jobs);
            return;
        }
        start(r, job);
        pthread_mutex_unlock(&r->jobs);
    }
}

static void reap(runner_t *r, job_t *job) {
    int status = 0;
    pthread_mutex_lock(&r->jobs);
    kill(-job->pid, SIGKILL); /* the group's stragglers; the leader is unreaped, so the id is still ours */
    reap_now(job->pid, &status);
    /* Deregister before closing: a child that has not finished its exec yet may hold a copy of
     * the descriptor, and epoll drops an entry only with the file's last descriptor. */
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, job->pidfd, NULL);
    close(job->pidfd);
    unlist(r, job);
    release(r, job, job->pid, status);
    pthread_cond_broadcast(&r->reaped);
    pthread_mutex_unlock(&r->jobs);
}

/* The descriptors' housekeeping, after the tasks are served: close what the loop discarded and
 * make memfd pairs up to FRESH_PAIRS. Both cost the kernel more than a spawn's bookkeeping (a
 * memfd's last close frees its pages), and here they cost the loop nothing. */
static void tend(runner_t *r) {
    for (;;) {
        int batch[64];
        int n = 0;
        pthread_mutex_lock(&r->queue);
        while (n < 64 && r->n_discarded) batch[n++] = r->discarded[--r->n_discarded];
        pthread_mutex_unlock(&r->queue);
        for (int i = 0; i < n; i++) close(batch[i]);
        if (n < 64) break;
    }
    for (;;) {
        pthread_mutex_lock(&r->queue);
        int full = r->n_fresh == FRESH_PAIRS;
        pthread_mutex_unlock(&r->queue);
        if (full) return;
        int out = memfd_create("knarr-stdout", MFD_CLOEXEC);
        int err = out < 0 ? -1 : memfd_create("knarr-stderr", MFD_CLOEXEC);
        if (err < 0) { /* out of descriptors or memory: the loop makes its own meanwhile */
            if (out >= 0) close(out);
            return;
        }
        pthread_mutex_lock(&r->queue);
        if (r->n_fresh < FRESH_PAIRS) {
            r->fresh[r->n_fresh][0] = out;
            r->fresh[r->n_fresh][1] = err;
            r->n_fresh++;
            out = err = -1;
        }
        pthread_mutex_unlock(&r->queue);
        if (out >= 0) { /* the pool filled meanwhile (it only empties, but be exact) */
            close(out);
            close(err);
            return;
        }
    }
}

static void *serve(void *arg) {
    runner_t *r = arg;
    struct epoll_event events[64];
    int64_t held_since = 0; /* CLOCK_MONOTONIC when the loop's wake-up was first held back, 0: it is not */
    for (;;) {
        tend(r);
        int timeout = -1;
        if (held_since) {
            int64_t left = held_since + HOLD_WAKE_MS * 1000000LL - now_ns(CLOCK_MONOTONIC);
            timeout = left > 0 ? (int)((left + 999999) / 1000000) : 0;
        }
        int n = epoll_wait(r->epfd, events, 64, timeout);
        for (int i = 0; i < n; i++) {
            if (events[i].data.ptr == NULL) {
                uint64_t count;
                if (read(r->wake_fd, &count, sizeof count) < 0) { /* EAGAIN: someone else read it */ }
                start_queued(r);
            } else {
                reap(r, events[i].data.ptr);
            }
        }
        int overdue = held_since && now_ns(CLOCK_MONOTONIC) - held_since >= HOLD_WAKE_MS * 1000000LL;
        if (notify(r, overdue)) {
            if (!held_since) held_since = now_ns(CLOCK_MONOTONIC);
        } else {
            held_since = 0;
        }
    }
    return NULL;
}

/* --- the loop's side -------------------------------------------------------------------- */

/* A new runner with its thread started, or NULL (errno says why). Its tasks start with the n
 * signals in reset at their defaults (spawner.RESET_SIGNALS: Python ignores them, and an ignored
 * signal stays ignored across exec). One per process is plenty. */
runner_t *kr_new(const int *reset, int n) {
    runner_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->jobs, NULL);
    pthread_mutex_init(&r->queue, NULL);
    pthread_cond_init(&r->reaped, NULL);
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    r->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    r->batch = 1;
    struct epoll_event wake = {.events = EPOLLIN, .data.ptr = NULL};
    r->stack = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (r->stack == MAP_FAILED) r->stack = NULL;
    if (!r->stack || r->epfd < 0 || r->wake_fd < 0 || r->done_fd < 0 ||
        epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->wake_fd, &wake) < 0)
        goto fail;
    sigset_t all, previous;
    sigemptyset(&r->defaults);
    for (int i = 0; i < n; i++) sigaddset(&r->defaults, reset[i]);
    /* The thread takes no signal: the interpreter's handlers belong to its main thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pthread_t thread;
    int code = pthread_create(&thread, NULL, serve, r);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (code) {
        errno = code;
        goto fail;
    }
    pthread_setname_np(thread, "knarr-runner"); /* what top -H and /proc/<pid>/task/<tid>/comm show */
    pthread_detach(thread);
    return r;
fail:;
    int failure = errno;
    if (r->epfd >= 0) close(r->epfd);
    if (r->wake_fd >= 0) close(r->wake_fd);
    if (r->done_fd >= 0) close(r->done_fd);
    if (r->stack) munmap(r->stack, STACK_BYTES);
    free(r);
    errno = failure;
    return NULL;
}

/* The eventfd that becomes readable when events are waiting. */
int kr_done_fd(runner_t *r) { return r->done_fd; }

/* Queue a task. path, argv and envp must stay valid, and the descriptors open, until its event
 * arrives or kr_kill has returned for it. hold = 0: the task has a slot and starts at once; hold
 * = 1: it waits in the held queue until a task of the same owner ends and passes it its slot (or
 * kr_pass gives it one), and is dropped unstarted (-ETIME) if by then CLOCK_REALTIME has passed
 * expires_ns (0: never). Returns 0, or -ENOMEM. */
int kr_submit(runner_t *r, int64_t id, const char *path, char *const *argv, char *const *envp, int in, int out,
              int err, int hold, int64_t expires_ns, int owner) {
    job_t *job = calloc(1, sizeof *job);
    if (!job) return -ENOMEM;
    *job = (job_t){.id = id, .path = path, .argv = argv, .envp = envp, .in = in, .out = out, .err = err,
                   .expires_ns = expires_ns, .owner = owner};
    pthread_mutex_lock(&r->queue);
    if (hold) push(&r->held_head, &r->held_tail, job);
    else push(&r->queued_head, &r->queued_tail, job);
    pthread_mutex_unlock(&r->queue);
    if (hold) return 0; /* a running task's end starts it, and wakes the thread anyway */
    uint64_t one = 1;
    if (write(r->wake_fd, &one, sizeof one) < 0) { /* the counter is full: the thread is awake anyway */ }
    return 0;
}

/* A slot of owner's freed outside the runner (a persistent task's, or one the loop had left): its
 * first held task gets it and starts. 1 if there was one, 0 if none is held. */
int kr_pass(runner_t *r, int owner) {
    pthread_mutex_lock(&r->queue);
    job_t *job = take_held(r, owner);
    if (job) push(&r->queued_head, &r->queued_tail, job);
    pthread_mutex_unlock(&r->queue);
    if (!job) return 0;
    uint64_t one = 1;
    if (write(r->wake_fd, &one, sizeof one) < 0) { /* the counter is full: the thread is awake anyway */ }
    return 1;
}

/* How many ended tasks the loop's wake-up may wait for while tasks are held (1: none). */
void kr_set_batch(runner_t *r, int batch) {
    pthread_mutex_lock(&r->queue);
    r->batch = batch > 0 ? batch : 1;
    pthread_mutex_unlock(&r->queue);
}

/* A fresh stdout/stderr memfd pair for a task: 1 with pair filled, 0 when none is ready (the
 * caller makes its own). The pair is the caller's from now on. */
int kr_take_pair(runner_t *r, int *pair) {
    pthread_mutex_lock(&r->queue);
    int got = r->n_fresh > 0;
    if (got) {
        r->n_fresh--;
        pair[0] = r->fresh[r->n_fresh][0];
        pair[1] = r->fresh[r->n_fresh][1];
    }
    pthread_mutex_unlock(&r->queue);
    return got;
}

/* Hand a descriptor the caller is done with to the thread, which closes it the next time it is
 * awake (every spawn and every exit wakes it; DISCARD_WAKE of them wake it by themselves). The
 * caller must not use fd again, nor pass it to a task submitted later. */
void kr_discard(runner_t *r, int fd) {
    pthread_mutex_lock(&r->queue);
    if (r->n_discarded == r->cap_discarded) {
        size_t cap = r->cap_discarded ? r->cap_discarded * 2 : 128;
        int *grown = realloc(r->discarded, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&r->queue);
            close(fd); /* no memory to queue it: the caller pays for this one close */
            return;
        }
        r->discarded = grown;
        r->cap_discarded = cap;
    }
    r->discarded[r->n_discarded++] = fd;
    int wake = r->n_discarded >= DISCARD_WAKE;
    pthread_mutex_unlock(&r->queue);
    if (wake) {
        uint64_t one = 1;
        if (write(r->wake_fd, &one, sizeof one) < 0) { /* the counter is full: the thread is awake anyway */ }
    }
}

/* Move up to max waiting events into out; returns how many. */
int kr_collect(runner_t *r, kr_event_t *out, int max) {
    pthread_mutex_lock(&r->queue);
    size_t n = r->n_events < (size_t)max ? r->n_events : (size_t)max;
    memcpy(out, r->events, n * sizeof *out);
    memmove(r->events, r->events + n, (r->n_events - n) * sizeof *out);
    r->n_events -= n;
    if (!r->n_events && r->signalled) {
        uint64_t count;
        if (read(r->done_fd, &count, sizeof count) < 0) { /* already drained */ }
        r->signalled = 0;
    }
    pthread_mutex_unlock(&r->queue);
    return (int)n;
}

static job_t *find_running(runner_t *r, int64_t id) {
    for (job_t *job = r->running; job; job = job->next)
        if (job->id == id) return job;
    return NULL;
}

/* When the task was spawned (CLOCK_MONOTONIC ns), 0 while it waits to start, -1 once it has ended. */
int64_t kr_started(runner_t *r, int64_t id) {
    pthread_mutex_lock(&r->jobs);
    job_t *job = find_running(r, id);
    int64_t started = job ? job->started_ns : -1;
    if (!job) {
        pthread_mutex_lock(&r->queue);
        for (job_t *q = r->queued_head; q && started < 0; q = q->next)
            if (q->id == id) started = 0;
        for (job_t *q = r->held_head; q && started < 0; q = q->next)
            if (q->id == id) started = 0;
        pthread_mutex_unlock(&r->queue);
    }
    pthread_mutex_unlock(&r->jobs);
    return started;
}

/* Stop a task: 1 if it had not started (it never will; its event says -ECANCELED), 2 if it was
 * running (its group got SIGKILL; with wait_seconds > 0, returns once it is reaped or that long
 * has passed), 0 if it had ended already. After this returns, the runner no longer uses the
 * task's argv, environment or descriptors. */
int kr_kill(runner_t *r, int64_t id, double wait_seconds) {
    pthread_mutex_lock(&r->jobs);
    pthread_mutex_lock(&r->queue);
    for (job_t *job = r->queued_head; job; job = job->next) {
        if (job->id == id) {
            job->cancelled = 1; /* its slot goes on when the thread comes to it */
            pthread_mutex_unlock(&r->queue);
            pthread_mutex_unlock(&r->jobs);
            return 1;
        }
    }
    for (job_t *job = r->held_head, *before = NULL; job; before = job, job = job->next) {
        if (job->id == id) { /* it has no slot: out of the queue, its event now */
            unlink_held(r, before, job);
            pthread_mutex_unlock(&r->queue);
            post(r, job, 0, -ECANCELED, SLOT_NONE);
            free(job);
            notify(r, 1);
            pthread_mutex_unlock(&r->jobs);
            return 1;
        }
    }
    pthread_mutex_unlock(&r->queue);
    job_t *job = find_running(r, id);
    if (!job) {
        pthread_mutex_unlock(&r->jobs);
        return 0;
    }
    kill(-job->pid, SIGKILL);
    if (wait_seconds > 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)wait_seconds;
        until.tv_nsec += (long)((wait_seconds - (double)(time_t)wait_seconds) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec += 1;
            until.tv_nsec -= 1000000000L;
        }
        while (find_running(r, id))
            if (pthread_cond_timedwait(&r->reaped, &r->jobs, &until) == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&r->jobs);
    return 2;
}

/* Hold off spawns and reaps (1), or 0 when one is under way; kr_resume ends the pause. */
int kr_pause(runner_t *r) { return pthread_mutex_trylock(&r->jobs) == 0; }

void kr_resume(runner_t *r) { pthread_mutex_unlock(&r->jobs); }

/* Whether pid is a task process of this runner; call only while paused. */
int kr_owns(runner_t *r, int pid) {
    for (job_t *job = r->running; job; job = job->next)
        if (job->pid == pid) return 1;
    return 0;
}
