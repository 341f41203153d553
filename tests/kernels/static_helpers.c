/* Static helpers that call each other and are kept out of line (noinline), so the
 * object has local calls between functions: poly <- act <- entry, and a recursive
 * static function. Local calls still need a PC-relative relocation on most targets. */
__attribute__((noinline)) static float poly(float x) {
    return (0.25f * x + 0.5f) * x + 1.0f;
}

__attribute__((noinline)) static float act(float x) {
    return x > 0.0f ? poly(x) : 0.5f * poly(-x);
}

__attribute__((noinline)) static int fib(int n) {
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

int static_helpers(const float *x, float *out, int n, int f) {
    for (int i = 0; i < n; i++)
        out[i] = act(x[i]);
    return fib(f);
}
