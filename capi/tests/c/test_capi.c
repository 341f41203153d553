/*
 * The C ABI from C: compile, load and call kernels through include/elfjit.h, and every
 * error path each function has. Built with `cc` against libelfjit.so (run under valgrind)
 * and libelfjit.a by scripts/test-capi. Prints one line per check and a closing
 * "test result: ok. N passed; M failed;" line; exits nonzero if any check failed.
 */
#define _GNU_SOURCE
#include "elfjit.h"

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <valgrind/valgrind.h>

static int passed, failed;

static void check(int ok, const char *what, int line) {
    if (ok) {
        passed++;
    } else {
        failed++;
        printf("FAILED (line %d): %s\n", line, what);
        const char *message = elfjit_last_error();
        printf("    last error: %s\n", message ? message : "(none)");
    }
}
#define CHECK(cond) check((cond), #cond, __LINE__)

/* The last error of this thread contains `needle`. */
static int error_has(const char *needle) {
    const char *message = elfjit_last_error();
    return message != NULL && strstr(message, needle) != NULL;
}

/* Compiles `source` with `options` (NULL: the defaults); NULL on failure. elfjit compiles
 * for the host CPU (-march=native), and valgrind's virtual CPU runs no AVX-512: under
 * valgrind, kernels for an x86_64 host are compiled for x86-64-v3 instead, or the x86-64
 * baseline on a CPU without it (clang takes the last -march), so that a host with AVX-512
 * runs them too. (-mno-avx512f is not enough: clang then still emits EVEX bf16
 * conversions for the newest CPUs' native features.) */
static elfjit_object *compile(const char *source, const elfjit_compile_options *options) {
    elfjit_compile_options chosen = options != NULL ? *options : elfjit_compile_options_default();
    const char *flags[8];
#if defined(__x86_64__)
    if (RUNNING_ON_VALGRIND && chosen.target == NULL && chosen.flag_count < 8) {
        for (size_t i = 0; i < chosen.flag_count; i++)
            flags[i] = chosen.flags[i];
        flags[chosen.flag_count] =
            __builtin_cpu_supports("x86-64-v3") ? "-march=x86-64-v3" : "-march=x86-64";
        chosen.flags = flags;
        chosen.flag_count++;
    }
#endif
    elfjit_object *object = NULL;
    if (elfjit_compile(source, strlen(source), &chosen, &object) != ELFJIT_OK)
        return NULL;
    return object;
}

/* Compiles and loads `source`; NULL on failure. */
static elfjit_module *build(const char *source) {
    elfjit_object *object = compile(source, NULL);
    if (object == NULL)
        return NULL;
    const uint8_t *data = NULL;
    size_t size = 0;
    elfjit_module *module = NULL;
    if (elfjit_object_bytes(object, &data, &size) == ELFJIT_OK)
        elfjit_load(data, size, &module);
    elfjit_object_free(object);
    return module;
}

static const void *symbol(const elfjit_module *module, const char *name) {
    const void *address = NULL;
    elfjit_module_symbol(module, name, &address);
    return address;
}

/* The C standard does not define object-to-function pointer casts; POSIX (dlsym) does. */
#define AS_FN(type, address) ((type)(uintptr_t)(address))

static const char *KERNELS =
    "int add(int a, int b) { return a + b; }\n"
    "float dot(const float *a, const float *b, int n) {\n"
    "    float s = 0;\n"
    "    for (int i = 0; i < n; i++) s += a[i] * b[i];\n"
    "    return s;\n"
    "}\n"
    "int counter;\n"
    "int bump(void) { return ++counter; }\n";

/* Before anything has found clang: a missing clang is reported, and not remembered. */
static void test_clang_not_found(void) {
    char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    setenv("ELFJIT_CLANG", "/nonexistent/clang", 1);
    elfjit_object *object = NULL;
    const char *source = "int f(void) { return 1; }";
    CHECK(elfjit_compile(source, strlen(source), NULL, &object) == ELFJIT_ERROR_CLANG_NOT_FOUND);
    CHECK(object == NULL);
    CHECK(error_has("ELFJIT_CLANG=/nonexistent/clang"));
    unsetenv("ELFJIT_CLANG");
    setenv("PATH", "/nonexistent", 1);
    CHECK(elfjit_compile(source, strlen(source), NULL, &object) == ELFJIT_ERROR_CLANG_NOT_FOUND);
    CHECK(error_has("no clang found"));
    if (path != NULL) {
        setenv("PATH", path, 1);
        free(path);
    }
    object = compile(source, NULL);
    CHECK(object != NULL);
    CHECK(elfjit_last_error() == NULL);
    elfjit_object_free(object);
}

static void test_compile_load_call(void) {
    CHECK(elfjit_version() != NULL && strlen(elfjit_version()) > 0);
    /* Optional and repeatable: the first load's one-time costs, taken now. */
    CHECK(elfjit_prepare() == ELFJIT_OK && elfjit_last_error() == NULL);
    CHECK(elfjit_prepare() == ELFJIT_OK);
    elfjit_module *module = build(KERNELS);
    CHECK(module != NULL);
    if (module == NULL)
        return;
    CHECK(elfjit_last_error() == NULL);

    int (*add)(int, int) = AS_FN(int (*)(int, int), symbol(module, "add"));
    CHECK(add != NULL && add(2, 40) == 42);
    float (*dot)(const float *, const float *, int) =
        AS_FN(float (*)(const float *, const float *, int), symbol(module, "dot"));
    float a[] = {1, 2, 3}, b[] = {4, 5, 6};
    CHECK(dot != NULL && dot(a, b, 3) == 32.0f);
    int (*bump)(void) = AS_FN(int (*)(void), symbol(module, "bump"));
    int *counter = (int *)symbol(module, "counter");
    CHECK(bump != NULL && counter != NULL && bump() == 1 && bump() == 2 && *counter == 2);

    size_t count = 0;
    CHECK(elfjit_module_function_count(module, &count) == ELFJIT_OK && count == 3);
    const char *names[3] = {0};
    for (size_t i = 0; i < 3; i++)
        CHECK(elfjit_module_function_name(module, i, &names[i]) == ELFJIT_OK && names[i] != NULL);
    CHECK(names[0] && names[1] && names[2] && strcmp(names[0], "add") == 0 &&
          strcmp(names[1], "dot") == 0 && strcmp(names[2], "bump") == 0);

    const void *start = NULL;
    size_t size = 0;
    CHECK(elfjit_module_region(module, &start, &size) == ELFJIT_OK && size > 0);
    uintptr_t lo = (uintptr_t)start, at = (uintptr_t)symbol(module, "dot");
    CHECK(lo <= at && at < lo + size);
    elfjit_module_free(module);
    CHECK(elfjit_last_error() == NULL);
}

static void test_ir_and_helpers(void) {
    elfjit_compile_options options = elfjit_compile_options_default();
    options.lang = ELFJIT_LANG_IR;
    options.opt_level = 3;
    const char *ir = "define i64 @twice(i64 %x) {\n  %y = shl i64 %x, 1\n  ret i64 %y\n}\n";
    elfjit_object *object = compile(ir, &options);
    CHECK(object != NULL);
    const uint8_t *data = NULL;
    size_t size = 0;
    CHECK(elfjit_object_bytes(object, &data, &size) == ELFJIT_OK && size > 4 &&
          memcmp(data, "\x7f" "ELF", 4) == 0);
    elfjit_module *module = NULL;
    CHECK(elfjit_load(data, size, &module) == ELFJIT_OK);
    elfjit_object_free(object);
    int64_t (*twice)(int64_t) = AS_FN(int64_t (*)(int64_t), symbol(module, "twice"));
    CHECK(twice != NULL && twice(-21) == -42);
    elfjit_module_free(module);

    /* 128-bit division and float <-> bfloat16: calls to compiler-rt helpers, far from
       the module, through stubs. */
    module = build("unsigned __int128 div(unsigned __int128 a, unsigned __int128 b)"
                   " { return a / b; }\n"
                   "float round_bf16(float x) { return (float)(__bf16)x; }\n");
    CHECK(module != NULL);
    unsigned __int128 (*divide)(unsigned __int128, unsigned __int128) =
        AS_FN(unsigned __int128 (*)(unsigned __int128, unsigned __int128), symbol(module, "div"));
    unsigned __int128 big = ((unsigned __int128)1 << 100) + 7;
    CHECK(divide != NULL && divide(big, 3) == big / 3);
    float (*round_bf16)(float) = AS_FN(float (*)(float), symbol(module, "round_bf16"));
    CHECK(round_bf16 != NULL && round_bf16(1.0f + 1.0f / 256) == 1.0f && round_bf16(3.0f) == 3.0f);
    elfjit_module_free(module);
}

static void test_compile_errors(void) {
    elfjit_object *object = (elfjit_object *)&object; /* overwritten with NULL on failure */
    const char *ok = "int f(void) { return 1; }";
    elfjit_compile_options options = elfjit_compile_options_default();

    CHECK(elfjit_compile(NULL, 3, NULL, &object) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(object == NULL && error_has("`source` is a null pointer"));
    CHECK(elfjit_compile(ok, strlen(ok), NULL, NULL) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(error_has("`object`"));

    options.lang = 7;
    CHECK(elfjit_compile(ok, strlen(ok), &options, &object) == ELFJIT_ERROR_ARGUMENT);
    CHECK(error_has("bad lang: 7"));
    options = elfjit_compile_options_default();
    options.opt_level = 4;
    CHECK(elfjit_compile(ok, strlen(ok), &options, &object) == ELFJIT_ERROR_ARGUMENT);
    CHECK(error_has("bad opt level: 4"));
    options = elfjit_compile_options_default();
    options.target = "vax";
    CHECK(elfjit_compile(ok, strlen(ok), &options, &object) == ELFJIT_ERROR_ARGUMENT);
    CHECK(error_has("unknown architecture `vax`"));
    options.target = "\xff\xfe";
    CHECK(elfjit_compile(ok, strlen(ok), &options, &object) == ELFJIT_ERROR_ARGUMENT);
    CHECK(error_has("not UTF-8"));
    options = elfjit_compile_options_default();
    options.flag_count = 1;
    CHECK(elfjit_compile(ok, strlen(ok), &options, &object) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(error_has("options.flags"));
    const char *flags[] = {"-DVALUE=5", NULL};
    options.flags = flags;
    options.flag_count = 2;
    CHECK(elfjit_compile(ok, strlen(ok), &options, &object) == ELFJIT_ERROR_NULL_POINTER);

    /* Extra flags reach clang. */
    options.flag_count = 1;
    const char *uses_flag = "int value(void) { return VALUE; }";
    CHECK(elfjit_compile(uses_flag, strlen(uses_flag), &options, &object) == ELFJIT_OK);
    const uint8_t *data = NULL;
    size_t size = 0;
    elfjit_module *module = NULL;
    elfjit_object_bytes(object, &data, &size);
    CHECK(elfjit_load(data, size, &module) == ELFJIT_OK);
    int (*value)(void) = AS_FN(int (*)(void), symbol(module, "value"));
    CHECK(value != NULL && value() == 5);
    elfjit_module_free(module);
    elfjit_object_free(object);

    const char *broken = "int f( {";
    CHECK(elfjit_compile(broken, strlen(broken), NULL, &object) == ELFJIT_ERROR_COMPILE);
    CHECK(object == NULL && error_has("error"));
    CHECK(elfjit_last_error() != NULL);
    /* A success clears the message. */
    object = compile(ok, NULL);
    CHECK(object != NULL && elfjit_last_error() == NULL);

    CHECK(elfjit_object_bytes(NULL, &data, &size) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(data == NULL && size == 0 && error_has("`object`"));
    CHECK(elfjit_object_bytes(object, NULL, &size) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(elfjit_object_bytes(object, &data, NULL) == ELFJIT_ERROR_NULL_POINTER);
    elfjit_object_free(object);
    elfjit_object_free(NULL);
    CHECK(elfjit_last_error() == NULL);
}

/* A resolver that supplies `external_scale` and counts its calls. */
static int scale_factor = 3;
static const void *resolve_scale(void *user_data, const char *name) {
    (*(int *)user_data)++;
    return strcmp(name, "external_scale") == 0 ? (const void *)&scale_factor : NULL;
}

static void test_load_errors(void) {
    elfjit_module *module = (elfjit_module *)&module;
    const uint8_t garbage[] = "this is not an ELF object";
    CHECK(elfjit_load(NULL, 10, &module) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(module == NULL && error_has("`objects[i]`"));
    CHECK(elfjit_load(garbage, sizeof garbage, NULL) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(elfjit_load(garbage, sizeof garbage, &module) == ELFJIT_ERROR_LINK && module == NULL);
    CHECK(elfjit_last_error() != NULL);
    CHECK(elfjit_load(garbage, 0, &module) == ELFJIT_ERROR_LINK);
    CHECK(elfjit_load(garbage, SIZE_MAX, &module) == ELFJIT_ERROR_ARGUMENT);
    CHECK(error_has("too large"));

    /* An object for another architecture. */
    elfjit_compile_options options = elfjit_compile_options_default();
    options.target = "aarch64";
    elfjit_object *foreign = compile("int f(int x) { return x + 1; }", &options);
    CHECK(foreign != NULL);
    const uint8_t *data = NULL;
    size_t size = 0;
    elfjit_object_bytes(foreign, &data, &size);
    CHECK(elfjit_load(data, size, &module) == ELFJIT_ERROR_UNSUPPORTED);
    CHECK(error_has("aarch64"));
    elfjit_object_free(foreign);

    /* An undefined symbol: a link error naming it, unless the resolver has it. */
    const char *scaled = "extern int external_scale;\n"
                         "int scaled(int x) { return x * external_scale; }\n";
    elfjit_object *object = compile(scaled, NULL);
    CHECK(object != NULL);
    elfjit_object_bytes(object, &data, &size);
    CHECK(elfjit_load(data, size, &module) == ELFJIT_ERROR_LINK);
    CHECK(error_has("external_scale"));
    int calls = 0;
    const uint8_t *objects[] = {data};
    size_t sizes[] = {size};
    CHECK(elfjit_load_objects(objects, sizes, 1, resolve_scale, &calls, &module) == ELFJIT_OK);
    CHECK(calls >= 1);
    int (*scale)(int) = AS_FN(int (*)(int), symbol(module, "scaled"));
    CHECK(scale != NULL && scale(14) == 42);
    elfjit_module_free(module);

    /* NULL arrays and entries. */
    CHECK(elfjit_load_objects(NULL, sizes, 1, NULL, NULL, &module) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(error_has("`objects`"));
    CHECK(elfjit_load_objects(objects, NULL, 1, NULL, NULL, &module) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(error_has("`sizes`"));
    const uint8_t *with_null[] = {data, NULL};
    size_t two_sizes[] = {size, 4};
    CHECK(elfjit_load_objects(with_null, two_sizes, 2, NULL, NULL, &module) ==
          ELFJIT_ERROR_NULL_POINTER);
    CHECK(elfjit_load_objects(objects, sizes, 1, NULL, NULL, NULL) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(error_has("`module`"));
    CHECK(elfjit_load_objects(objects, sizes, 0, NULL, NULL, &module) != ELFJIT_OK);
    CHECK(module == NULL && elfjit_last_error() != NULL);
    elfjit_object_free(object);

    /* Two objects calling each other. */
    elfjit_object *caller = compile("int callee(int);\nint caller(int x) { return callee(x) + 1; }",
                                    NULL);
    elfjit_object *callee = compile("int callee(int x) { return x * 2; }", NULL);
    CHECK(caller != NULL && callee != NULL);
    const uint8_t *pair[2];
    size_t pair_sizes[2];
    elfjit_object_bytes(caller, &pair[0], &pair_sizes[0]);
    elfjit_object_bytes(callee, &pair[1], &pair_sizes[1]);
    CHECK(elfjit_load_objects(pair, pair_sizes, 2, NULL, NULL, &module) == ELFJIT_OK);
    int (*call)(int) = AS_FN(int (*)(int), symbol(module, "caller"));
    CHECK(call != NULL && call(20) == 41);
    elfjit_module_free(module);
    elfjit_object_free(caller);
    elfjit_object_free(callee);
}

static void test_module_errors(void) {
    elfjit_module *module = build(KERNELS);
    CHECK(module != NULL);
    const void *address = (const void *)&address;
    CHECK(elfjit_module_symbol(module, "missing", &address) == ELFJIT_ERROR_NOT_FOUND);
    CHECK(address == NULL && error_has("no symbol `missing`") && error_has("add, dot, bump"));
    CHECK(elfjit_module_symbol(NULL, "add", &address) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(error_has("`module`"));
    CHECK(elfjit_module_symbol(module, NULL, &address) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(error_has("`name`"));
    CHECK(elfjit_module_symbol(module, "add", NULL) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(error_has("`address`"));
    CHECK(elfjit_module_symbol(module, "\xc3\x28", &address) == ELFJIT_ERROR_ARGUMENT);

    size_t count = 99;
    CHECK(elfjit_module_function_count(NULL, &count) == ELFJIT_ERROR_NULL_POINTER && count == 0);
    CHECK(elfjit_module_function_count(module, NULL) == ELFJIT_ERROR_NULL_POINTER);
    const char *name = "x";
    CHECK(elfjit_module_function_name(module, 3, &name) == ELFJIT_ERROR_ARGUMENT && name == NULL);
    CHECK(error_has("the module has 3 functions"));
    CHECK(elfjit_module_function_name(NULL, 0, &name) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(elfjit_module_function_name(module, 0, NULL) == ELFJIT_ERROR_NULL_POINTER);

    const void *start = NULL;
    size_t size = 0;
    CHECK(elfjit_module_region(NULL, &start, &size) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(elfjit_module_region(module, NULL, &size) == ELFJIT_ERROR_NULL_POINTER);
    CHECK(elfjit_module_region(module, &start, NULL) == ELFJIT_ERROR_NULL_POINTER);
    elfjit_module_free(module);
    elfjit_module_free(NULL);
    CHECK(elfjit_last_error() == NULL);
}

/* The process's mappings (lines of /proc/self/maps) that are not both writable and
 * executable. elfjit never makes such a mapping (W^X: os/tests/arena.rs and
 * os/tests/arena_threads.rs check that), but valgrind maps its own translations and heap
 * that way in the client's address space, and grows them as the run goes on: they are not
 * counted, so that the count means the same natively and under valgrind. */
static int mapping_count(void) {
    FILE *maps = fopen("/proc/self/maps", "r");
    if (maps == NULL)
        return -1;
    int lines = 0;
    char line[4096];
    while (fgets(line, sizeof line, maps) != NULL) {
        const char *perms = strchr(line, ' ');
        lines += perms == NULL || strncmp(perms + 1, "rwx", 3) != 0;
        /* The rest of a line longer than the buffer (a long path) is not a new line. */
        while (strchr(line, '\n') == NULL && fgets(line, sizeof line, maps) != NULL)
            ;
    }
    fclose(maps);
    return lines;
}

/* elfjit_module_free gives a module's memory back to the arena: after a warm-up, thousands
 * of load, call and free cycles of one object run at a few dozen addresses at most, not a
 * new one each time, and add no mappings. */
static void test_free_returns_memory(void) {
    elfjit_object *object = compile("int twice(int x) { return 2 * x; }\n"
                                    "static const int k[4] = {1, 2, 3, 4};\n"
                                    "int pick(int i) { return k[i & 3]; }\n",
                                    NULL);
    CHECK(object != NULL);
    if (object == NULL)
        return;
    const uint8_t *data = NULL;
    size_t size = 0;
    CHECK(elfjit_object_bytes(object, &data, &size) == ELFJIT_OK);
    /* The page-granular arena's pool hands a freed run out again once 16 others were freed
     * after it (its RECYCLE_AT), so a steady loop cycles through about that many. */
    enum { WARM_UP = 100, CYCLES = 3000, MAX_ADDRESSES = 32 };
    uintptr_t seen[MAX_ADDRESSES] = {0};
    int distinct = 0, calls_ok = 1, loads_ok = 1;
    int before = -1;
    for (int i = 0; i < CYCLES; i++) {
        elfjit_module *module = NULL;
        if (elfjit_load(data, size, &module) != ELFJIT_OK || module == NULL) {
            loads_ok = 0;
            break;
        }
        int (*twice)(int) = AS_FN(int (*)(int), symbol(module, "twice"));
        int (*pick)(int) = AS_FN(int (*)(int), symbol(module, "pick"));
        calls_ok &= twice != NULL && pick != NULL && twice(i) == 2 * i && pick(i) == (i & 3) + 1;
        uintptr_t at = (uintptr_t)twice;
        int known = i < WARM_UP;
        for (int j = 0; j < distinct && j < MAX_ADDRESSES; j++)
            known |= seen[j] == at;
        if (!known && distinct < MAX_ADDRESSES)
            seen[distinct] = at;
        distinct += !known;
        elfjit_module_free(module);
        if (i == WARM_UP - 1)
            before = mapping_count();
    }
    CHECK(loads_ok);
    CHECK(calls_ok);
    CHECK(distinct <= MAX_ADDRESSES);
    int after = mapping_count();
    CHECK(before > 0 && after >= 0 && after <= before + 1);
    if (distinct > MAX_ADDRESSES || after > before + 1)
        fprintf(stderr, "  %d distinct addresses, %d mappings after the warm-up, %d after %d cycles\n",
                distinct, before, after, CYCLES);
    elfjit_object_free(object);
}

/* Counts the entries of elfjit's object cache under `dir`. */
static int cache_entries(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/objects", dir);
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strstr(e->d_name, ".obj") != NULL;
    closedir(d);
    return n;
}

static void remove_cache(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/objects", dir);
    DIR *d = opendir(path);
    if (d != NULL) {
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (e->d_name[0] == '.')
                continue;
            char file[1200];
            snprintf(file, sizeof file, "%s/%s", path, e->d_name);
            unlink(file);
        }
        closedir(d);
        rmdir(path);
    }
    rmdir(dir);
}

static void test_cache(void) {
    char dir[] = "/tmp/elfjit-capi-cache-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    setenv("ELFJIT_CACHE_DIR", dir, 1); /* read when the cache is first used, below */
    elfjit_compile_options options = elfjit_compile_options_default();
    const char *source = "int cached(void) { return 7; }";
    elfjit_object *uncached = compile(source, &options);
    CHECK(uncached != NULL && cache_entries(dir) == 0);
    options.cache = 1;
    elfjit_object *first = compile(source, &options);
    /* The object, and clang's --version line (remembered per clang executable). */
    int entries = cache_entries(dir);
    CHECK(first != NULL && entries >= 1);
    elfjit_object *second = compile(source, &options);
    const uint8_t *a = NULL, *b = NULL;
    size_t a_size = 0, b_size = 0;
    elfjit_object_bytes(first, &a, &a_size);
    elfjit_object_bytes(second, &b, &b_size);
    CHECK(second != NULL && a_size == b_size && memcmp(a, b, a_size) == 0);
    CHECK(cache_entries(dir) == entries); /* a hit writes nothing */
    elfjit_object_free(uncached);
    elfjit_object_free(first);
    elfjit_object_free(second);
    remove_cache(dir);
}

/* Each thread compiles, loads and calls its own kernel, and sees only its own errors. */
static void *worker(void *arg) {
    intptr_t id = (intptr_t)arg;
    char source[128];
    snprintf(source, sizeof source, "long k%ld(long x) { return x * %ld; }", (long)id, (long)id + 1);
    elfjit_module *module = build(source);
    char name[16];
    snprintf(name, sizeof name, "k%ld", (long)id);
    long (*kernel)(long) = module ? AS_FN(long (*)(long), symbol(module, name)) : NULL;
    int ok = kernel != NULL && kernel(10) == 10 * (id + 1);
    const void *address = NULL;
    ok = ok && elfjit_module_symbol(module, "absent", &address) == ELFJIT_ERROR_NOT_FOUND;
    ok = ok && error_has(name); /* this thread's message lists this thread's kernel */
    elfjit_module_free(module);
    return (void *)(intptr_t)ok;
}

static void test_threads(void) {
    const void *address = NULL;
    CHECK(elfjit_module_symbol(NULL, "x", &address) == ELFJIT_ERROR_NULL_POINTER);
    pthread_t threads[4];
    for (intptr_t i = 0; i < 4; i++)
        CHECK(pthread_create(&threads[i], NULL, worker, (void *)i) == 0);
    for (int i = 0; i < 4; i++) {
        void *ok = NULL;
        pthread_join(threads[i], &ok);
        CHECK(ok == (void *)1);
    }
    /* The main thread's message is untouched by the workers'. */
    CHECK(error_has("`module` is a null pointer"));
}

/* A pthread key destructor runs after the thread's Rust thread-locals were destroyed
 * (glibc runs the C++/Rust TLS destructors first): elfjit calls made there still work and
 * report their status instead of aborting the process. */
static pthread_key_t exit_key;
static elfjit_status status_in_destructor = ELFJIT_OK;
static char message_in_destructor[512];

static void on_thread_exit(void *value) {
    const void *address = NULL;
    status_in_destructor = elfjit_module_symbol(NULL, "x", &address);
    const char *message = elfjit_last_error();
    snprintf(message_in_destructor, sizeof message_in_destructor, "%s",
             message ? message : "(NULL)");
    elfjit_module_free((elfjit_module *)value); /* a successful call: the module is freed */
}

static void *exiting_worker(void *module) {
    const void *address = NULL;
    /* An elfjit call first, so this thread's error slot exists (and is destroyed at exit). */
    elfjit_module_symbol(NULL, "x", &address);
    pthread_setspecific(exit_key, module);
    return NULL;
}

static void test_calls_from_a_thread_local_destructor(void) {
    elfjit_module *module = build("int f(void) { return 1; }");
    CHECK(module != NULL);
    CHECK(pthread_key_create(&exit_key, on_thread_exit) == 0);
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, exiting_worker, module) == 0);
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(status_in_destructor == ELFJIT_ERROR_NULL_POINTER);
    CHECK(strstr(message_in_destructor, "`module` is a null pointer") != NULL ||
          strstr(message_in_destructor, "thread-local destructor") != NULL);
    printf("  from a key destructor: status %d, \"%.60s...\"\n", (int)status_in_destructor,
           message_in_destructor);
    pthread_key_delete(exit_key);
}

/* A compile past the compiler memory limit fails with a message naming the limit; the
 * same limit compiles an ordinary kernel. */
static void test_compile_memory_limit(void) {
    elfjit_compile_options options = elfjit_compile_options_default();
    CHECK(options.memory_limit == ELFJIT_COMPILE_MEMORY_DEFAULT);
    options.memory_limit = 128u << 20;
    elfjit_object *object = compile("asm(\".fill 268435456\");\nint f(void) { return 1; }\n",
                                    &options);
    CHECK(object == NULL);
    CHECK(error_has("exceeded the compiler memory limit of 128 MiB (ELFJIT_COMPILE_MEMORY)"));
    object = compile("int f(void) { return 1; }", &options);
    CHECK(object != NULL);
    elfjit_object_free(object);
    options.memory_limit = ELFJIT_COMPILE_MEMORY_UNLIMITED;
    object = compile("int f(void) { return 1; }", &options);
    CHECK(object != NULL);
    elfjit_object_free(object);
}

/* `--leak`: load a module and never free it, so valgrind's leak check has something to
   find (scripts/test-capi checks that it does: the check can fail). */
static int leak_on_purpose(void) {
    elfjit_module *module = build("int f(void) { return 1; }");
    printf("leaked module %p\n", (void *)module);
    module = NULL;
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--leak") == 0)
        return leak_on_purpose();
    test_clang_not_found();
    test_compile_load_call();
    test_ir_and_helpers();
    test_compile_errors();
    test_load_errors();
    test_module_errors();
    test_free_returns_memory();
    test_cache();
    test_threads();
    test_calls_from_a_thread_local_destructor();
    test_compile_memory_limit();
    printf("test result: %s. %d passed; %d failed; (C API checks)\n", failed ? "FAILED" : "ok",
           passed, failed);
    return failed != 0;
}
