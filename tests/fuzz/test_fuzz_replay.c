/*
 * test_fuzz_replay.c — the corpus replay ctest of the fuzz targets (zstd's "fuzz replay" idea): runs
 * each target's one-input function (fuzz_entries.c per fz_targets row, fuzz_workload.c) on every file of
 * tests/fuzz/corpus/<target>/ and on seeded mutations of each (byte flips and special bytes;
 * ATTN_FUZZ_MUTATIONS per file, default 20, 5 under ATTN_TEST_SMALL), so the targets' own checks (exact-size
 * buffers under the sanitizers, nothing written on failure, every failure named) run in every CI tier without
 * libFuzzer. A target whose corpus directory is missing or empty fails the test.
 *   test_fuzz_replay [CORPUS_ROOT]              replay every target (default: the in-tree corpus)
 *   test_fuzz_replay --target NAME DIR          replay one target's inputs from DIR
 *   test_fuzz_replay --generate NAME DIR N      write up to N inputs of target NAME that reach a successful call,
 *                                               3 per entry, found by random search (how the seeds were made)
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign, dirent */
#include <dirent.h>

#define FZ_NO_MAIN
#include "fuzz_entries.c" /* NOLINT: the targets themselves */
#ifndef FZ_NO_WORKLOAD
#include "fuzz_workload.c" /* NOLINT */
#endif
#include "harness.h"

/* Target i < FZ_NUM_TARGETS is fz_targets[i]; the one after it the workload parser. */
static const fz_target *replay_target = &fz_targets[0];
static int replay_is_workload = 0;
static int replay_one(const uint8_t *data, size_t size) {
#ifndef FZ_NO_WORKLOAD
    if (replay_is_workload) return fz_workload_run(data, size);
#endif
    return fz_run(replay_target, data, size);
}
static int replay_select(const char *name) {
    replay_is_workload = 0;
    for (int i = 0; i < FZ_NUM_TARGETS; i++)
        if (strcmp(fz_targets[i].name, name) == 0) return replay_target = &fz_targets[i], 1;
#ifndef FZ_NO_WORKLOAD
    if (strcmp(name, "workload") == 0) return replay_is_workload = 1, 1;
#endif
    return 0;
}

#ifndef ATTN_FUZZ_CORPUS
#define ATTN_FUZZ_CORPUS "tests/fuzz/corpus"
#endif

/* Corpus files (not mutations) of the current target whose call succeeded: the harness's work bound
 * (FZ_MAX_WORK) must leave valid calls to every target, or its kernels are no longer fuzzed. */
static int replay_ok_files;

static int replay_file(const char *path, uint64_t seed, int mutations) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    uint8_t buf[4096];
    const size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    replay_one(buf, n);
#ifndef FZ_NO_WORKLOAD
    replay_ok_files += replay_is_workload ? fz_workload_last_rc == 0 : fz_last_status == ATTN_STATUS_OK;
#else
    replay_ok_files += fz_last_status == ATTN_STATUS_OK;
#endif
    if (getenv("ATTN_FUZZ_VERBOSE") && !replay_is_workload)
        printf("%s: entry %d -> %s %s\n", path, fz_last_entry, attn_status_string(fz_last_status), fz_last_msg);
    th_rng r;
    th_rng_seed(&r, seed);
    uint8_t m[4096];
    static const uint8_t special[] = {0, 1, 0x7F, 0x80, 0xF0, 0xF4, 0xF8, 0xFB, 0xFC, 0xFF};
    for (int i = 0; i < mutations && n > 0; i++) {
        memcpy(m, buf, n);
        const int edits = 1 + (int)th_rng_int(&r, 0, 3);
        for (int e = 0; e < edits; e++) {
            const size_t at = (size_t)th_rng_int(&r, 0, (int64_t)n - 1);
            m[at] = th_rng_uniform(&r) < 0.5 ? (uint8_t)th_rng_int(&r, 0, 255)
                                             : special[th_rng_int(&r, 0, sizeof special - 1)];
        }
        replay_one(m, n);
    }
    return 1;
}

static int generate(const char *dir, int want) {
    th_rng r;
    th_rng_seed(&r, 2026);
    int found = 0, seen[32] = {0};
    uint8_t buf[512];
    for (long tries = 0; tries < 4000000 && found < want; tries++) {
        const size_t n = 64 + (size_t)th_rng_int(&r, 0, 448);
        for (size_t i = 0; i < n; i++) {
            const double u = th_rng_uniform(&r);
            buf[i] = u < 0.6 ? (uint8_t)th_rng_int(&r, 0, 8) : (uint8_t)th_rng_int(&r, 0, 255);
        }
        buf[0] = (uint8_t)(tries % replay_target->num_entries);
        fz_run(replay_target, buf, n);
        if (fz_last_status != ATTN_STATUS_OK || seen[fz_last_entry] >= 3) continue;
        seen[fz_last_entry]++;
        char path[1024];
        snprintf(path, sizeof path, "%s/ok-entry%02d-%d", dir, fz_last_entry, seen[fz_last_entry]);
        FILE *fp = fopen(path, "wb");
        if (fp) fwrite(buf, 1, n, fp), fclose(fp), found++;
    }
    printf("generated %d inputs\n", found);
    return 0;
}

/* Replays every file of dir with the selected target; returns the number of files. */
static int replay_dir(const char *dir, int mutations, uint64_t *seed) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "test_fuzz_replay: cannot open corpus %s\n", dir);
        return 0;
    }
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        files += replay_file(path, (*seed)++, mutations);
    }
    closedir(d);
    return files;
}

int main(int argc, char **argv) {
    const char *env = getenv("ATTN_FUZZ_MUTATIONS");
    const int mutations = env ? atoi(env) : (th_test_small() ? 5 : 20);
    uint64_t seed = 1;
    if (argc >= 5 && strcmp(argv[1], "--generate") == 0) {
        if (!replay_select(argv[2]) || replay_is_workload) return fprintf(stderr, "unknown target %s\n", argv[2]), 1;
        return generate(argv[3], atoi(argv[4]));
    }
    if (argc >= 4 && strcmp(argv[1], "--target") == 0) {
        if (!replay_select(argv[2])) return fprintf(stderr, "unknown target %s\n", argv[2]), 1;
        replay_ok_files = 0;
        const int files = replay_dir(argv[3], mutations, &seed);
        printf("test_fuzz_replay: %s: %d files (%d succeed), %d mutations each: no finding\n", argv[2], files,
               replay_ok_files, mutations);
        return files > 0 ? 0 : 1;
    }
    const char *root = argc > 1 ? argv[1] : ATTN_FUZZ_CORPUS;
    const char *names[FZ_NUM_TARGETS + 1];
    int num = 0;
    for (int i = 0; i < FZ_NUM_TARGETS; i++) names[num++] = fz_targets[i].name;
#ifndef FZ_NO_WORKLOAD
    names[num++] = "workload";
#endif
    int bad = 0;
    for (int i = 0; i < num; i++) {
        replay_select(names[i]);
        char dir[2048];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        replay_ok_files = 0;
        const int files = replay_dir(dir, mutations, &seed);
        printf("test_fuzz_replay: %-9s %4d corpus files (%3d succeed), %d mutations each: no finding\n", names[i], files,
               replay_ok_files, mutations);
        if (replay_ok_files == 0) fprintf(stderr, "test_fuzz_replay: %s: no corpus file reaches a successful call\n", names[i]);
        bad += files == 0 || replay_ok_files == 0;
    }
    return bad ? 1 : 0;
}
