/* Mutable state the kernel writes: a call counter and a table in .data, a scratch
 * buffer and an accumulator in .bss (must start zeroed). A fresh module starts at
 * calls == 41, so the first call returns 42. out[i] receives the scratch value seen
 * before this call's write (0 on a fresh module) plus the data table entry. */
#include <stdint.h>

static int calls = 41;
static int32_t weights[4] = {3, -5, 7, 11};
static float scratch[64];
static int64_t total;

int data_bss_state(const float *x, float *out, int n) {
    calls++;
    for (int i = 0; i < n && i < 64; i++) {
        float old = scratch[i];
        scratch[i] = x[i] * (float)calls;
        weights[i & 3] += 1;
        out[i] = old + (float)weights[i & 3];
        total += (int64_t)scratch[i];
    }
    return calls + (int)(total & 0xffff);
}
