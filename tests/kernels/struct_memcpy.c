/* Large structs copied by value (clang calls memcpy for these), a runtime-size
 * __builtin_memcpy (always a call to memcpy) and a zero-initialised big local
 * (memset). */
#include <stdint.h>

struct big {
    float v[256];
    int32_t tag;
    int32_t len;
};

__attribute__((noinline)) static struct big scale(struct big b, float s) {
    for (int i = 0; i < b.len; i++)
        b.v[i] *= s;
    b.tag += 1;
    return b;
}

int struct_memcpy(const float *in, float *out, int n, float s) {
    struct big a = {{0}};
    if (n > 256)
        n = 256;
    __builtin_memcpy(a.v, in, (unsigned long)n * sizeof(float));
    a.len = n;
    a.tag = 100;
    struct big b = scale(a, s);
    struct big c = b;
    __builtin_memcpy(out, c.v, (unsigned long)n * sizeof(float));
    return c.tag + (a.tag == 100);
}
