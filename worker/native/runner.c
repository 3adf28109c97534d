/* knarr's native task runner: starts task processes, waits for them and reaps them, off the
 * event loop and without the GIL (knarr/engine/native.py drives it through ctypes).
 *
 * One thread per runner owns every process it starts. The event loop submits a task (argv,
 * environment, its stdin data, its timeout and its output cap) and later collects one event
 * per task, in batches: an eventfd wakes the loop once for however many tasks ended meanwhile.
 *
 * Input, output and deadlines are the thread's too, so a task costs the loop no descriptor or
 * timer, and no system call but the eventfd write that wakes the thread (none for a held task).
 * Stdin data goes into a memfd of its own, which the thread writes and rewinds before the spawn:
 * the child reads it as a regular file; a task without data reads a copy of the /dev/null the
 * runner keeps open. Each task's stdout and stderr are memfds the thread made
 * ahead (a few pairs at a time). While it runs, the thread keeps each of them to the cap: it
 * checks their sizes a first_check after the start, again that soon while the output floods in
 * (fast_growth bytes or more since the last check), backing off to last_check otherwise, and
 * cuts a file that has passed the cap back to it (the child's offset
 * is shared, so it goes on writing at the cap and never sees an error). A task still running
 * timeout after its start gets its group killed, and its event says so. Once the task has
 * ended, the thread reads the kept head of each stream into the event and closes the memfds (a
 * memfd's last close frees its pages: that costs the loop nothing here). kr_new takes the check
 * timings from knarr/engine/capture.py, which the spawner thread's tasks follow too.
 *
 * The thread spawns each task in a session of its own (so its
 * whole tree can be killed), with the signals kr_new was given (SIGPIPE, SIGXFSZ) at their
 * defaults and no signal blocked, then waits on the tasks' pidfds with one epoll (the thread
 * blocks every signal but SIGCHLD, which its tasks' exits send it). It spawns
 * as posix_spawnp does (clone with CLONE_VM | CLONE_VFORK, the PATH lookup, the same errors)
 * but on one stack mapped for good, and gets each pidfd from the clone itself. Where it can (x86-64,
 * Linux 5.5 or later, clone3 not filtered out) it clones with CLONE_CLEAR_SIGHAND, so the kernel
 * resets the interpreter's signal handlers in the child at once, where posix_spawn's child asks
 * for each of the 64 signals' handler in a system call of its own (12.5 us a task here). When a task's
 * leader exits, its group is swept with SIGKILL (the unreaped leader keeps the group's id
 * from being reused) and the leader is reaped.
 *
 * Slots. The loop's scheduler grants each task a slot (one of max_executors) or, when none is
 * free, a place in the runner's held queue. A task with a slot starts at once; a held one starts
 * when a running task ends and passes it its slot, here on the thread, without a round trip
 * through the loop (or when the loop passes one over, kr_pass). While tasks are held the loop
 * need not hurry for ended ones, so its wake-up waits for `batch` of them, `hold_ns` at most
 * (kr_set_batch; 3 ms until it is called).
 *
 * Every submitted task yields exactly one event: {id, pid, status, started_ns, ended_ns, slot, flags,
 * its output}, status being the wait status, or -errno when the spawn failed (-ECANCELED: killed
 * before it started; -ETIME: it expired while held), slot what became of its slot (SLOT_*),
 * which the loop's scheduler mirrors, and flags whether its deadline killed it and which
 * stream was cut at the cap.
 *
 * Locks: `jobs` covers the running list, each spawn from the clone until the process is
 * listed, each reap (and the start of the held task it passes its slot to), the deadline and
 * cap checks, and kills; `queue` covers submitted tasks not started yet (held or not) and the
 * events. Whoever takes both takes `jobs` first.
 * Holding `jobs` (kr_pause) therefore means no task process exists that is not listed:
 * containment's sweep of detached orphans (containment.py) relies on it to leave the runner's
 * processes alone.
 *
 * Linux only (CLONE_PIDFD: 5.2 or later; CLONE_CLEAR_SIGHAND: 5.5, used when the kernel takes it).
 * Build: cc -O2 -shared -fPIC -pthread runner.c
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define KR_ABI 10 /* bump when a signature or kr_event_t changes: native.py checks it */
#define HOLD_NS_UNSET 3000000 /* the longest the loop's wake-up is held back until kr_set_batch says */
#define FRESH_PAIRS 8    /* stdout/stderr memfd pairs the thread keeps made, ready for the next tasks */

typedef struct {
    int64_t id;
    int32_t pid;        /* 0 when it never started */
    int32_t status;     /* wait status, or -errno */
    int64_t started_ns; /* CLOCK_MONOTONIC when it was spawned, 0 when it never was */
    int64_t ended_ns;   /* CLOCK_MONOTONIC when it was reaped (the loop may hear of it later), 0 when it never was */
    int32_t slot;       /* SLOT_FREED, SLOT_PASSED or SLOT_NONE */
    int32_t flags;      /* TIMED_OUT, OUT_CUT, ERR_CUT */
    const char *out, *err; /* the kept heads of stdout and stderr (NULL: empty), valid until the next kr_collect */
    int64_t out_len, err_len;
} kr_event_t;

/* kr_event_t.flags (native.py reads the same numbers). */
#define TIMED_OUT 1 /* its deadline passed: its group was killed */
#define OUT_CUT 2   /* stdout went past the cap: only its head is kept */
#define ERR_CUT 4   /* the same for stderr */

/* kr_event_t.slot: what became of the slot the task had (native.py reads the same numbers). */
#define SLOT_FREED 0  /* free again */
#define SLOT_PASSED 1 /* taken by the next held task */
#define SLOT_NONE 2   /* it had none: it left the held queue unstarted (kr_kill) */

typedef struct job {
    int64_t id;
    char *const *envp; /* NULL: the worker's own environment */
    const char *input; /* stdin data (input_len bytes, NULL: /dev/null), written into `in` at the start */
    int64_t input_len;
    int in;            /* stdin's memfd (-1 until the start, or for /dev/null) */
    int out[2];        /* stdout, stderr: memfds the runner gives it when it starts (-1 until then) */
    int cancelled;
    int64_t expires_ns; /* held tasks: CLOCK_REALTIME after which they are dropped unstarted (0: never) */
    int64_t started_ns, ended_ns;
    int owner; /* the pool scheduler that granted its slot (kr_submit) */
    int64_t timeout_ns, cap;      /* from kr_submit: its deadline after its start (0: none), bytes kept per stream */
    int64_t deadline_ns;          /* CLOCK_MONOTONIC; 0: none, or it has passed */
    int64_t check_ns, check_gap;  /* the next output check, and the gap before it */
    int64_t seen[2];              /* stream sizes at the last check */
    int flags;                    /* TIMED_OUT, OUT_CUT, ERR_CUT */
    char *head[2];                /* the kept heads, read once it has ended; they go with its event */
    int64_t head_len[2];
    pid_t pid;
    int pidfd;
    struct job *next, *prev;
    char *args[]; /* argv: pointers into the block kr_submit was given (the path to run first), NULL-terminated */
} job_t;

typedef struct {
    pthread_mutex_t jobs, queue;
    pthread_cond_t reaped;
    job_t *queued_head, *queued_tail, *running;
    job_t *held_head, *held_tail; /* under `queue`: tasks waiting for a running task's slot */
    int batch;                    /* ended tasks the loop's wake-up may wait for while tasks are held */
    int64_t hold_ns;              /* the longest it waits for them (the thread reads it without the lock) */
    kr_event_t *events;
    size_t n_events, cap_events;
    int signalled;
    char **spent;     /* under `queue`: the heads the last kr_collect handed over, freed by the next */
    size_t n_spent, cap_spent;
    int fresh[FRESH_PAIRS][2]; /* the thread's alone: made ahead, for the tasks it starts */
    int n_fresh;
    int64_t first_check, last_check, fast_growth; /* capture.py's output-check timings (ns) and growth (bytes) */
    int epfd, wake_fd, done_fd;
    sigset_t defaults; /* what the tasks start with at their defaults */
    char *stack;       /* the children's, until they exec (spawns are one at a time) */
    int clear_sighand; /* the thread's: clone3 with CLONE_CLEAR_SIGHAND may be tried (0 once it was refused) */
    int devnull;       /* /dev/null, open for good: the stdin of tasks without data (-1: each child opens it) */
} runner_t;

static const char DEV_NULL[] = "/dev/null";

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000 /* Linux 5.2 */
#endif
#define STACK_BYTES (256 * 1024)

#if defined(__x86_64__)
#define CLEAR_SIGHAND_TRIED 1
/* clone3 (Linux 5.3) and its arguments' first version, spelled out: older kernel headers lack them. */
#define CLONE_CLEAR_SIGHAND_FLAG 0x100000000ULL /* Linux 5.5 */
typedef struct {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
} clone3_args_t;

/* clone3, the child calling fn(arg) on the stack the arguments give it, then exiting with what fn
 * returns; the parent gets clone3's answer: the child's pid, or -errno. In assembly, because the
 * child starts on its new stack right after the system call, where no C frame of the caller is.
 * (fn and arg wait in r8 and r9, which the system call leaves alone in both processes.) */
__attribute__((visibility("hidden"))) long kr_clone3(clone3_args_t *args, size_t size, int (*fn)(void *), void *arg);
__asm__(".pushsection .text\n"
        ".globl kr_clone3\n"
        ".hidden kr_clone3\n"
        ".type kr_clone3, @function\n"
        "kr_clone3:\n"
        "    mov %rdx, %r8\n"
        "    mov %rcx, %r9\n"
        "    mov $435, %eax\n" /* clone3 */
        "    syscall\n"
        "    test %rax, %rax\n"
        "    jz 1f\n"
        "    ret\n"
        "1:  xor %ebp, %ebp\n" /* the child: no frame above fn's */
        "    and $-16, %rsp\n"
        "    mov %r9, %rdi\n"
        "    call *%r8\n"
        "    mov %eax, %edi\n"
        "    mov $60, %eax\n" /* exit: fn never returns, but should it */
        "    syscall\n"
        "    hlt\n"
        ".size kr_clone3, .-kr_clone3\n"
        ".popsection\n");
#else
#define CLEAR_SIGHAND_TRIED 0 /* other architectures: the child asks for each handler, as posix_spawn's does */
#endif

int kr_abi(void) { return KR_ABI; }

/* --- events (under `queue`) ------------------------------------------------------------- */
/* Post the job's event; its output heads go with it. */
static void post(runner_t *r, job_t *job, pid_t pid, int status, int slot) {
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
    r->events[r->n_events++] = (kr_event_t){job->id, (int32_t)pid, status, job->started_ns, job->ended_ns, slot,
                                            job->flags, job->head[0], job->head[1], job->head_len[0], job->head_len[1]};
    job->head[0] = job->head[1] = NULL;
    pthread_mutex_unlock(&r->queue);
}

/* Wake the loop for the waiting events; returns 1 when it held the wake-up back instead. While
 * tasks are held, every slot a task frees goes straight to the next one, so the loop need not
 * hurry: it is woken once `batch` events wait (or hold_ns has passed, or force). */
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
    int handlers_cleared; /* cloned with CLONE_CLEAR_SIGHAND: no handler of the interpreter's is left */
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
            (!s->handlers_cleared && sigaction(sig, NULL, &now) == 0 && now.sa_handler != SIG_IGN &&
             now.sa_handler != SIG_DFL))
            sigaction(sig, &dfl, NULL);
    }
    sigset_t none;
    sigemptyset(&none);
    int in = job->in >= 0 ? place(job->in, 0) : s->r->devnull >= 0 ? place(s->r->devnull, 0) : open_at(0, DEV_NULL);
    if (setsid() < 0 || in < 0 || place(job->out[0], 1) < 0 || place(job->out[1], 2) < 0 ||
        sigprocmask(SIG_SETMASK, &none, NULL) < 0)
        goto failed;
    exec_found(job->args[0], job->args, job->envp ? job->envp : environ, s->search);
failed:
    s->error = errno ? errno : ENOEXEC;
    _exit(127);
}

/* Clone the child that execs the job: its pid (-1 and errno when that failed), its pidfd in *pidfd. */
static pid_t clone_child(runner_t *r, start_t *start, int *pidfd) {
#if defined(__x86_64__)
    if (r->clear_sighand) {
        clone3_args_t args = {.flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | CLONE_CLEAR_SIGHAND_FLAG,
                              .pidfd = (uint64_t)(uintptr_t)pidfd, .exit_signal = SIGCHLD,
                              .stack = (uint64_t)(uintptr_t)r->stack, .stack_size = STACK_BYTES};
        start->handlers_cleared = 1;
        long pid = kr_clone3(&args, sizeof args, child, start);
        if (pid >= 0) return (pid_t)pid;
        /* Refused as a whole (no clone3 before 5.3, no CLONE_CLEAR_SIGHAND before 5.5, or a seccomp
         * filter), no child made: clone as posix_spawn does, from now on. Else a real failure. */
        if (pid != -ENOSYS && pid != -EINVAL && pid != -EPERM) {
            errno = (int)-pid;
            return -1;
        }
        r->clear_sighand = 0;
        start->handlers_cleared = 0;
    }
#endif
    return clone(child, r->stack + STACK_BYTES, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, start, pidfd);
}

/* Spawn the job (under `jobs`): 0 when it runs (listed), else the errno of what failed, with
 * *pid the child's when one was made (it has been killed and reaped). */
static int spawn(runner_t *r, job_t *job, pid_t *pid_out) {
    start_t start = {.job = job, .r = r, .search = NULL, .handlers_cleared = 0, .error = 0};
    *pid_out = 0;
    if (!strchr(job->args[0], '/')) {
        start.search = getenv("PATH");
        if (!start.search) start.search = "/bin:/usr/bin";
    }
    int pidfd = -1, status = 0;
    /* What posix_spawn does (the parent waits until the child has exec'd), but on a stack mapped
     * once rather than per spawn (unmapping it cost a TLB shootdown across CPUs each time), and
     * with the pidfd from the same call. */
    int64_t started = now_ns(CLOCK_MONOTONIC);
    pid_t pid = clone_child(r, &start, &pidfd);
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
    job->deadline_ns = job->timeout_ns > 0 ? started + job->timeout_ns : 0;
    job->check_gap = r->first_check;
    job->check_ns = started + r->first_check;
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

/* A new stdout/stderr memfd pair into pair: 0, or an errno (and pair untouched). */
static int make_pair(int pair[2]) {
    int out = memfd_create("knarr-stdout", MFD_CLOEXEC);
    int err = out < 0 ? -1 : memfd_create("knarr-stderr", MFD_CLOEXEC);
    if (err < 0) {
        int failure = errno;
        if (out >= 0) close(out);
        return failure;
    }
    pair[0] = out;
    pair[1] = err;
    return 0;
}

/* A stdout/stderr memfd pair for the job: one made ahead (tend), else made now; 0 or an errno. */
static int give_memfds(runner_t *r, job_t *job) {
    if (r->n_fresh == 0) return make_pair(job->out);
    r->n_fresh--;
    job->out[0] = r->fresh[r->n_fresh][0];
    job->out[1] = r->fresh[r->n_fresh][1];
    return 0;
}

/* The job's stdin data in a memfd of its own, rewound: 0 or an errno. */
static int give_input(job_t *job) {
    job->in = memfd_create("knarr-stdin", MFD_CLOEXEC);
    if (job->in < 0) return errno;
    for (int64_t done = 0; done < job->input_len;) {
        ssize_t n = write(job->in, job->input + done, (size_t)(job->input_len - done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? errno : EIO;
        done += n;
    }
    return lseek(job->in, 0, SEEK_SET) < 0 ? errno : 0;
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
    pid_t pid = 0;
    int error = give_memfds(r, job);
    if (!error && job->input) error = give_input(job);
    if (!error) error = spawn(r, job, &pid);
    if (error) release(r, job, pid, -error);
}

/* Close the job's descriptors and free it (its heads went with its event). */
static void drop(job_t *job) {
    if (job->in >= 0) close(job->in);
    for (int i = 0; i < 2; i++) {
        if (job->out[i] >= 0) close(job->out[i]);
        free(job->head[i]);
    }
    free(job);
}

/* The job has ended, or will never run, and lets go of its slot (under `jobs`): the next held
 * job takes the slot, and the job's event says so (SLOT_PASSED) or that the slot is free again
 * (SLOT_FREED). The job is dropped once the next one has started. */
static void release(runner_t *r, job_t *job, pid_t pid, int status) {
    job_t *next = pop_held(r, job->owner);
    post(r, job, pid, status, next ? SLOT_PASSED : SLOT_FREED);
    if (next) start(r, next);
    drop(job);
}

/* Keep one of a running job's streams to the cap: a file past it is cut back (the offset first,
 * so a write racing with the cut lands past the cap and is cut next time). How much it grew since
 * the last check. */
static int64_t keep_to_cap(job_t *job, int i) {
    struct stat st;
    if (fstat(job->out[i], &st) < 0) return 0;
    int64_t size = st.st_size, grown = size > job->seen[i] ? size - job->seen[i] : 0;
    if (size > job->cap) {
        lseek(job->out[i], job->cap, SEEK_SET);
        if (ftruncate(job->out[i], job->cap) == 0) size = job->cap;
        job->flags |= i ? ERR_CUT : OUT_CUT;
    }
    job->seen[i] = size;
    return grown;
}

/* The kept head of an ended job's stream, into job->head[i] (the cap at most). */
static void read_head(job_t *job, int i) {
    struct stat st;
    if (fstat(job->out[i], &st) < 0) return;
    if (st.st_size > job->cap) job->flags |= i ? ERR_CUT : OUT_CUT;
    int64_t keep = st.st_size < job->cap ? st.st_size : job->cap, got = 0;
    if (keep <= 0) return;
    char *head = malloc((size_t)keep);
    if (!head) return; /* no memory for it: the task's output reads as empty */
    while (got < keep) {
        ssize_t n = pread(job->out[i], head + got, (size_t)(keep - got), got);
        if (n <= 0) break; /* shrunk under us: a descendant that left the group truncated it */
        got += n;
    }
    job->head[i] = head;
    job->head_len[i] = got;
}

/* Running jobs' deadlines and output checks that are due (under `jobs`); when the next one is
 * due (CLOCK_MONOTONIC), 0 if none is. */
static int64_t watch(runner_t *r, int64_t now) {
    int64_t next = 0;
    for (job_t *job = r->running; job; job = job->next) {
        if (job->deadline_ns && now >= job->deadline_ns) {
            kill(-job->pid, SIGKILL); /* its exit, on the pidfd, ends it */
            job->flags |= TIMED_OUT;
            job->deadline_ns = 0;
        }
        if (job->check_ns && now >= job->check_ns) {
            int64_t grown = keep_to_cap(job, 0) + keep_to_cap(job, 1);
            job->check_gap = grown >= r->fast_growth ? r->first_check
                             : job->check_gap * 2 < r->last_check ? job->check_gap * 2 : r->last_check;
            job->check_ns = now + job->check_gap;
        }
        if (job->deadline_ns && (!next || job->deadline_ns < next)) next = job->deadline_ns;
        if (job->check_ns && (!next || job->check_ns < next)) next = job->check_ns;
    }
    return next;
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
    job->ended_ns = now_ns(CLOCK_MONOTONIC);
    /* Deregister before closing: a child that has not finished its exec yet may hold a copy of
     * the descriptor, and epoll drops an entry only with the file's last descriptor. */
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, job->pidfd, NULL);
    close(job->pidfd);
    unlist(r, job);
    read_head(job, 0);
    read_head(job, 1);
    release(r, job, job->pid, status);
    pthread_cond_broadcast(&r->reaped);
    pthread_mutex_unlock(&r->jobs);
}

/* After the tasks are served: make memfd pairs up to FRESH_PAIRS, ready for the next tasks (out
 * of descriptors or memory, it stops: a task's start tries again, give_memfds). */
static void tend(runner_t *r) {
    while (r->n_fresh < FRESH_PAIRS && make_pair(r->fresh[r->n_fresh]) == 0) r->n_fresh++;
}

static void *serve(void *arg) {
    runner_t *r = arg;
    struct epoll_event events[64];
    int64_t held_since = 0; /* CLOCK_MONOTONIC when the loop's wake-up was first held back, 0: it is not */
    for (;;) {
        tend(r);
        int64_t now = now_ns(CLOCK_MONOTONIC);
        pthread_mutex_lock(&r->jobs);
        int64_t due = watch(r, now);
        pthread_mutex_unlock(&r->jobs);
        int64_t hold = __atomic_load_n(&r->hold_ns, __ATOMIC_RELAXED);
        if (held_since && (!due || held_since + hold < due)) due = held_since + hold;
        int timeout = -1;
        if (due) timeout = due > now ? (int)((due - now + 999999) / 1000000) : 0;
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
        int overdue = held_since && now_ns(CLOCK_MONOTONIC) - held_since >= hold;
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
 * signal stays ignored across exec). Their outputs are checked first_check_ns after their start,
 * then as capture.py's next_check_delay says (fast_growth bytes, last_check_ns). One per process
 * is plenty. */
runner_t *kr_new(const int *reset, int n, int64_t first_check_ns, int64_t last_check_ns, int64_t fast_growth) {
    runner_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->first_check = first_check_ns > 0 ? first_check_ns : 1000000;
    r->last_check = last_check_ns > r->first_check ? last_check_ns : r->first_check;
    r->fast_growth = fast_growth;
    pthread_mutex_init(&r->jobs, NULL);
    pthread_mutex_init(&r->queue, NULL);
    pthread_cond_init(&r->reaped, NULL);
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    r->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    r->batch = 1;
    r->hold_ns = HOLD_NS_UNSET;
    r->clear_sighand = CLEAR_SIGHAND_TRIED;
    r->devnull = open(DEV_NULL, O_RDONLY | O_CLOEXEC); /* a copy in each child saves it an open and a close */
    struct epoll_event wake = {.events = EPOLLIN, .data.ptr = NULL};
    r->stack = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (r->stack == MAP_FAILED) r->stack = NULL;
    if (!r->stack || r->epfd < 0 || r->wake_fd < 0 || r->done_fd < 0 ||
        epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->wake_fd, &wake) < 0)
        goto fail;
    sigset_t all, previous;
    sigemptyset(&r->defaults);
    for (int i = 0; i < n; i++) sigaddset(&r->defaults, reset[i]);
    /* The thread takes no signal (the interpreter's handlers belong to its main thread) but
     * SIGCHLD. Its tasks' exits send it that (an exec resets any other exit signal), and a signal
     * that its target thread blocks is queued, not dropped: the kernel then woke the event loop's
     * thread for it, once per task, only for it to be discarded there. Unblocked, and left at its
     * default, it is dropped as it is sent; a handler someone installs still gets it. */
    sigfillset(&all);
    sigdelset(&all, SIGCHLD);
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
    if (r->devnull >= 0) close(r->devnull);
    if (r->wake_fd >= 0) close(r->wake_fd);
    if (r->done_fd >= 0) close(r->done_fd);
    if (r->stack) munmap(r->stack, STACK_BYTES);
    free(r);
    errno = failure;
    return NULL;
}

/* The eventfd that becomes readable when events are waiting. */
int kr_done_fd(runner_t *r) { return r->done_fd; }

/* Queue a task. argv is argc strings one after another, each ended by its NUL (the path to
 * run first). argv, envp and input (its stdin data, input_len bytes; NULL: /dev/null)
 * must stay valid until its event arrives or kr_kill has returned for it. The task is killed if
 * it still runs timeout_ns after its start (0: never), and cap bytes of each of its streams are
 * kept. hold = 0: the task has a slot and starts at once; hold
 * = 1: it waits in the held queue until a task of the same owner ends and passes it its slot (or
 * kr_pass gives it one), and is dropped unstarted (-ETIME) if by then CLOCK_REALTIME has passed
 * expires_ns (0: never). Returns 0, -EINVAL (argc < 1) or -ENOMEM. */
int kr_submit(runner_t *r, int64_t id, const char *argv, int argc, char *const *envp, const char *input,
              int64_t input_len, int64_t timeout_ns, int64_t cap, int hold, int64_t expires_ns, int owner) {
    if (argc < 1) return -EINVAL;
    job_t *job = calloc(1, sizeof *job + ((size_t)argc + 1) * sizeof(char *));
    if (!job) return -ENOMEM;
    *job = (job_t){.id = id, .envp = envp, .input = input, .input_len = input_len,
                   .in = -1, .out = {-1, -1},
                   .timeout_ns = timeout_ns, .cap = cap > 0 ? cap : 0, .expires_ns = expires_ns, .owner = owner};
    for (int i = 0; i < argc; i++) {
        job->args[i] = (char *)argv;
        argv += strlen(argv) + 1;
    }
    job->args[argc] = NULL;
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

/* How many ended tasks the loop's wake-up may wait for while tasks are held (1: none), and for
 * how long at most (hold_ns; the thread's next wait follows it). */
void kr_set_batch(runner_t *r, int batch, int64_t hold_ns) {
    pthread_mutex_lock(&r->queue);
    r->batch = batch > 0 ? batch : 1;
    pthread_mutex_unlock(&r->queue);
    __atomic_store_n(&r->hold_ns, hold_ns > 0 ? hold_ns : 0, __ATOMIC_RELAXED);
}

/* Move up to max waiting events into out; returns how many. Their output heads stay valid until
 * the next kr_collect (which frees them). */
int kr_collect(runner_t *r, kr_event_t *out, int max) {
    pthread_mutex_lock(&r->queue);
    for (size_t i = 0; i < r->n_spent; i++) free(r->spent[i]);
    r->n_spent = 0;
    size_t n = r->n_events < (size_t)max ? r->n_events : (size_t)max;
    if (2 * n > r->cap_spent) {
        char **grown = realloc(r->spent, 2 * (size_t)max * sizeof *grown);
        if (!grown) { /* no memory to list them: hand over none this time, the loop asks again */
            pthread_mutex_unlock(&r->queue);
            return 0;
        }
        r->spent = grown;
        r->cap_spent = 2 * (size_t)max;
    }
    memcpy(out, r->events, n * sizeof *out);
    for (size_t i = 0; i < n; i++) {
        if (out[i].out) r->spent[r->n_spent++] = (char *)out[i].out;
        if (out[i].err) r->spent[r->n_spent++] = (char *)out[i].err;
    }
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
            drop(job);
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

/* Whether spawns clone with CLONE_CLEAR_SIGHAND (1) or the child asks for each signal's handler
 * (0); until the first spawn, 1 says it will be tried. `off` stops trying for good (the tests'
 * way to the other path). Under `jobs`, which every spawn holds. */
int kr_clear_sighand(runner_t *r, int off) {
    pthread_mutex_lock(&r->jobs);
    if (off) r->clear_sighand = 0;
    int now = r->clear_sighand;
    pthread_mutex_unlock(&r->jobs);
    return now;
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
