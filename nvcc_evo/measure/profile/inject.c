/* nvcc-evo's kernel recorder, loaded into a CUDA process by the driver
 * (CUDA_INJECTION64_PATH names this library; the driver calls
 * InitializeInjection at the process's first CUDA call, children and MPI
 * ranks too, since they inherit the environment).
 *
 * It asks CUPTI's activity API for CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
 * records (no hardware counters: kernels still run concurrently and at
 * their speed), adds each one to a table keyed by kernel name and launch
 * shape, and at exit writes the table to FOLDER/kernels-PID-NS-XXXXXX.tsv,
 * FOLDER being NVCC_EVO_KERNEL_TIMES, NS the inode of the process's pid
 * namespace (one pid names two processes in two containers, or after
 * `unshare --pid`), XXXXXX the random part of the temporary the table is
 * written to first (created O_EXCL), which is then linked to its name (a
 * reader never sees half a file, and no process's file replaces another's).
 * Lines: a header "# nvcc-evo kernel times 1 pid=PID pidns=NS dropped=N",
 * then calls, total, least and most ns, grid x y z, block x y z, registers
 * per thread, shared bytes (static + dynamic) and the (mangled) name, by tabs.
 *
 * Snapshots: every SNAPSHOT_SECONDS a thread of its own flushes CUPTI's
 * buffers and writes the table again over the process's own file (a new
 * temporary renamed over it), so a process that never reaches its exit
 * (killed: nvcc-evo --hot interrupted by Ctrl-C kills the command's whole
 * group; a crash; an exec) leaves what it recorded until its last snapshot.
 * Each file is a process's whole table then: one file a process image.
 * A snapshot's flush is CUPTI's default one, which hands over only buffers
 * whose records are complete; the forced flush is the exit's alone: it
 * hands over kernels still queued or running too, unfinished (no end time),
 * and CUPTI never delivers them again (cupti_activity.h): a forced flush
 * every second lost the kernels queued at that moment (the likely cause of
 * an SGEMM_CUDA retune's baseline reading 168.9 ms +-28% of 233 ms, its
 * kernels queued 50 at a time). An unfinished record is counted as dropped:
 * its time is not known, and the reader says so.
 *
 * A fork: the locks are held across it (no thread of the parent is inside
 * the table or a write then), and the child's table starts empty, with no
 * file of its own yet: what the parent recorded before is the parent's to
 * write; the child writes what it records itself, at its own exit, under
 * its own pid (a forked child has no snapshot thread: CUDA is not usable
 * in it).
 *
 * Built by nvcc_evo.measure.profile.library against the CUPTI it finds
 * (the nvidia-cuda-cupti wheel's headers and libcupti), once per release. */
#include <cupti.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BUFFER_BYTES (8u << 20)
#define SNAPSHOT_SECONDS 1
#define RECORD_ALIGN 8
#define EXPORT __attribute__((visibility("default")))

typedef struct {
    char *name;
    int32_t grid[3], block[3];
    uint32_t registers, shared;
    uint64_t calls, total, least, most;
} Row;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;      /* the table */
static pthread_mutex_t writing = PTHREAD_MUTEX_INITIALIZER;   /* a write of the file (taken before `lock`) */
static Row *rows;
static size_t capacity, used;
static uint64_t dropped;
static int started, written, armed, snapshots;
static char own[4300];                /* the file this process wrote last ("": none yet) */

static uint64_t hash_of(const char *name, const int32_t *grid, const int32_t *block, uint32_t registers,
                        uint32_t shared) {
    uint64_t h = 1469598103934665603ull;            /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 1099511628211ull;
    int32_t shape[8] = {grid[0], grid[1], grid[2], block[0], block[1], block[2], (int32_t)registers, (int32_t)shared};
    for (size_t i = 0; i < sizeof shape; i++) h = (h ^ ((unsigned char *)shape)[i]) * 1099511628211ull;
    return h;
}

static int same(const Row *row, const char *name, const int32_t *grid, const int32_t *block, uint32_t registers,
                uint32_t shared) {
    return row->registers == registers && row->shared == shared && !memcmp(row->grid, grid, sizeof row->grid)
        && !memcmp(row->block, block, sizeof row->block) && !strcmp(row->name, name);
}

static Row *place(Row *table, size_t size, const char *name, const int32_t *grid, const int32_t *block,
                  uint32_t registers, uint32_t shared) {
    size_t i = hash_of(name, grid, block, registers, shared) & (size - 1);
    while (table[i].name && !same(&table[i], name, grid, block, registers, shared)) i = (i + 1) & (size - 1);
    return &table[i];
}

static int grow(void) {                               /* the table kept at most half full */
    size_t size = capacity ? 2 * capacity : 1024;
    Row *table = calloc(size, sizeof *table);
    if (!table) return 0;
    for (size_t i = 0; i < capacity; i++)
        if (rows[i].name) *place(table, size, rows[i].name, rows[i].grid, rows[i].block, rows[i].registers,
                                 rows[i].shared) = rows[i];
    free(rows);
    rows = table;
    capacity = size;
    return 1;
}

/* One kernel run (lock held). */
static void add(const char *name, const int32_t *grid, const int32_t *block, uint32_t registers, uint32_t shared,
                uint64_t nanoseconds) {
    if (2 * (used + 1) > capacity && !grow()) { dropped++; return; }
    Row *row = place(rows, capacity, name ? name : "(unnamed)", grid, block, registers, shared);
    if (!row->name) {
        row->name = strdup(name ? name : "(unnamed)");
        if (!row->name) { dropped++; return; }
        for (char *c = row->name; *c; c++) if (*c == '\t' || *c == '\n' || *c == '\r') *c = ' ';
        memcpy(row->grid, grid, sizeof row->grid);
        memcpy(row->block, block, sizeof row->block);
        row->registers = registers;
        row->shared = shared;
        row->least = UINT64_MAX;
        used++;
    }
    row->calls++;
    row->total += nanoseconds;
    if (nanoseconds < row->least) row->least = nanoseconds;
    if (nanoseconds > row->most) row->most = nanoseconds;
}

EXPORT void nvcc_evo_add(const char *name, int gx, int gy, int gz, int bx, int by, int bz, unsigned registers,
                         unsigned shared, unsigned long long nanoseconds) {     /* (the tests' way in: no GPU) */
    int32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    pthread_mutex_lock(&lock);
    add(name, grid, block, registers, shared, nanoseconds);
    pthread_mutex_unlock(&lock);
}

/* The inode of this process's pid namespace (0 where /proc says none). */
static unsigned long long pid_namespace(void) {
    struct stat ns;
    return stat("/proc/self/ns/pid", &ns) == 0 ? (unsigned long long)ns.st_ino : 0;
}

/* The table into `fd` (the temporary); 0 when written whole. */
static int write_table(int fd, long pid, unsigned long long ns) {
    FILE *out = fdopen(fd, "w");
    if (!out) { close(fd); return 1; }
    pthread_mutex_lock(&lock);
    fprintf(out, "# nvcc-evo kernel times 1 pid=%ld pidns=%llu dropped=%llu\n", pid, ns,
            (unsigned long long)dropped);
    for (size_t i = 0; i < capacity; i++) {
        const Row *r = &rows[i];
        if (r->name)
            fprintf(out, "%llu\t%llu\t%llu\t%llu\t%d\t%d\t%d\t%d\t%d\t%d\t%u\t%u\t%s\n",
                    (unsigned long long)r->calls, (unsigned long long)r->total, (unsigned long long)r->least,
                    (unsigned long long)r->most, r->grid[0], r->grid[1], r->grid[2], r->block[0], r->block[1],
                    r->block[2], r->registers, r->shared, r->name);
    }
    pthread_mutex_unlock(&lock);
    int failed = fflush(out) != 0 || fsync(fd) != 0;
    failed |= fclose(out) != 0;
    return failed;
}

/* The table to FOLDER/kernels-PID-NS-XXXXXX.tsv, a name no other file has, or over this process's own
 * file of an earlier write; 0 when written (or nothing asked). Callers hold `writing`. */
static int write_file(void) {
    const char *folder = getenv("NVCC_EVO_KERNEL_TIMES");
    if (!folder || !*folder) return 0;
    long pid = (long)getpid();
    unsigned long long ns = pid_namespace();
    char temporary[4200], path[4300];
    if (snprintf(temporary, sizeof temporary, "%s/.kernels-%ld-%llu-XXXXXX", folder, pid, ns)
        >= (int)sizeof temporary) return 1;
    int fd = mkstemp(temporary);                      /* O_CREAT | O_EXCL: a planted file or link refused */
    if (fd < 0) return 1;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (write_table(fd, pid, ns) != 0) { unlink(temporary); return 1; }
    if (own[0]) {                                     /* (the process's own file: its table now replaces it) */
        if (rename(temporary, own) == 0) return 0;
        unlink(temporary);
        return 1;
    }
    const char *random = temporary + strlen(temporary) - 6;
    for (int again = 0; again < 100; again++) {
        if (again) snprintf(path, sizeof path, "%s/kernels-%ld-%llu-%s-%d.tsv", folder, pid, ns, random, again);
        else snprintf(path, sizeof path, "%s/kernels-%ld-%llu-%s.tsv", folder, pid, ns, random);
        if (link(temporary, path) == 0) {             /* (link: never over another's file) */
            unlink(temporary);
            memcpy(own, path, sizeof own);
            return 0;
        }
        if (errno != EEXIST) break;
    }
    int failed = errno != EEXIST ? rename(temporary, path) != 0 : 1;    /* (a file system of no links) */
    if (failed) unlink(temporary);
    else memcpy(own, path, sizeof own);
    return failed;
}

EXPORT int nvcc_evo_write(void) {     /* (the tests' way in) */
    pthread_mutex_lock(&writing);
    int failed = write_file();
    pthread_mutex_unlock(&writing);
    return failed;
}

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *most_records) {
    uint8_t *raw = NULL;
    if (posix_memalign((void **)&raw, RECORD_ALIGN, BUFFER_BYTES) != 0) raw = NULL;
    *buffer = raw;
    *size = raw ? BUFFER_BYTES : 0;
    *most_records = 0;
}

static void CUPTIAPI completed(CUcontext context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)size;
    CUpti_Activity *record = NULL;
    pthread_mutex_lock(&lock);
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)record;
        if (k->start == 0 || k->end <= k->start) { dropped++; continue; }   /* unfinished: no time */
        int32_t grid[3] = {k->gridX, k->gridY, k->gridZ}, block[3] = {k->blockX, k->blockY, k->blockZ};
        add(k->name, grid, block, k->registersPerThread,
            (uint32_t)k->staticSharedMemory + (uint32_t)k->dynamicSharedMemory,
            k->end - k->start);
    }
    size_t lost = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream, &lost) == CUPTI_SUCCESS) dropped += lost;
    pthread_mutex_unlock(&lock);
    free(buffer);
}

static void at_exit(void) {
    pthread_mutex_lock(&writing);
    if (!written) {
        written = 1;                                  /* (the snapshots end here) */
        if (started) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        if ((used || dropped) && write_file() != 0)
            fprintf(stderr, "nvcc-evo: cannot write kernel times to %s\n", getenv("NVCC_EVO_KERNEL_TIMES"));
    }
    pthread_mutex_unlock(&writing);
}

/* The snapshot thread: the table written again every SNAPSHOT_SECONDS, until the exit's write. */
static void *snapshot(void *unused) {
    (void)unused;
    struct timespec pause = {SNAPSHOT_SECONDS, 0};
    for (;;) {
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&writing);
        if (written) break;
        if (started) cuptiActivityFlushAll(0);        /* (complete buffers only: see the top) */
        if (used || dropped) write_file();            /* (a failure: said by the exit's write) */
        pthread_mutex_unlock(&writing);
    }
    pthread_mutex_unlock(&writing);
    return NULL;
}

/* The locks whole across a fork: `writing` first, as the snapshot thread takes them. */
static void before_fork(void) { pthread_mutex_lock(&writing); pthread_mutex_lock(&lock); }

static void after_fork(void) { pthread_mutex_unlock(&lock); pthread_mutex_unlock(&writing); }

static void in_child(void) {          /* a fork: the child's table starts empty (the parent writes its own) */
    for (size_t i = 0; i < capacity; i++) free(rows[i].name);
    free(rows);
    rows = NULL;
    capacity = used = 0;
    dropped = 0;
    written = 0;
    own[0] = 0;                       /* (the parent's file is the parent's) */
    snapshots = 0;                    /* (threads do not cross a fork) */
    started = 0;                      /* (CUDA is not usable in a forked child: nothing to flush there) */
    pthread_mutex_unlock(&lock);      /* (taken before the fork by this very thread) */
    pthread_mutex_unlock(&writing);
}

/* The snapshot thread started, once (InitializeInjection's; the tests' way in); 0 when running. */
EXPORT int nvcc_evo_snapshots(void) {
    if (snapshots) return 0;
    pthread_t thread;
    pthread_attr_t detached;
    pthread_attr_init(&detached);
    pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
    int failed = pthread_create(&thread, &detached, snapshot, NULL);
    pthread_attr_destroy(&detached);
    snapshots = !failed;
    return failed;
}

/* The table written at exit, emptied in a forked child; once. */
EXPORT void nvcc_evo_arm(void) {       /* (InitializeInjection's, once CUPTI records; the tests' way in) */
    if (armed) return;
    armed = 1;
    pthread_atfork(before_fork, after_fork, in_child);
    atexit(at_exit);
}

EXPORT int InitializeInjection(void) {
    if (started) return 1;
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS
        || cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "nvcc-evo: CUPTI refused kernel activity recording: no kernel times for this process\n");
        return 0;
    }
    started = 1;
    nvcc_evo_arm();
    if (nvcc_evo_snapshots() != 0)
        fprintf(stderr, "nvcc-evo: no snapshot thread: kernel times are written at exit alone\n");
    return 1;
}
