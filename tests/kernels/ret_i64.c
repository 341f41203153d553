/* Returns a 64-bit integer that does not fit in 32 bits: an FNV-1a style hash over
 * int64 values with wrapping multiplication. */
#include <stdint.h>

int64_t hash_i64(const int64_t *x, int n, int64_t seed) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)seed;
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)x[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return (int64_t)h;
}
