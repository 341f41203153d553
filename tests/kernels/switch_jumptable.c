/* A dense switch (10 cases + default) with different work per case, so clang
 * lowers it to a jump table (in .rodata) rather than a value lookup table. */
#include <stdint.h>

void switch_jumptable(const int32_t *ops, const int32_t *vals, int32_t *out, int n) {
    for (int i = 0; i < n; i++) {
        int32_t v = vals[i];
        int32_t r;
        switch (ops[i]) {
        case 0: r = v + 1; break;
        case 1: r = v * 3; break;
        case 2: r = v ^ 0x55; break;
        case 3: r = v << 2; break;
        case 4: r = -v; break;
        case 5: r = v / 7; break;
        case 6: r = v % 5; break;
        case 7: r = (v >> 1) | 1; break;
        case 8: r = v * v - 2; break;
        case 9: r = v > 10 ? 10 : v; break;
        default: r = -1000; break;
        }
        out[i] = r;
    }
}
