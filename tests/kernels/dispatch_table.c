/* A mutable table of function pointers (an activation dispatch table). Being
 * writable it stays in .data.rel, so with -fPIC each entry needs an absolute 64-bit
 * relocation against a local function; calls through it are indirect. The kernel
 * rotates the table after use, so it cannot be folded into constants. */
#include <stdint.h>

static float relu(float x) { return x > 0.0f ? x : 0.0f; }
static float negate(float x) { return -x; }
static float square(float x) { return x * x; }
static float halve(float x) { return 0.5f * x; }

static float (*ops[4])(float) = {relu, negate, square, halve};

int dispatch_table(const int32_t *codes, const float *x, float *out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = ops[codes[i] & 3](x[i]);
    float (*first)(float) = ops[0];
    ops[0] = ops[1];
    ops[1] = ops[2];
    ops[2] = ops[3];
    ops[3] = first;
    return (ops[0] == negate) + 2 * (ops[3] == relu) + 4 * (ops[1] == square);
}
