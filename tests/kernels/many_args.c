/* Twenty mixed-type arguments (i8, u16, i32, i64, f32, f64, pointers): more
 * integer/pointer and more floating-point arguments than any supported ABI has
 * registers, so some travel on the stack. out[] receives every by-value argument
 * exactly as the callee saw it (as double: exact for these values); the return is
 * a weighted checksum of small magnitude (so every term shows in it; the 64-bit
 * arguments enter modulo 65536 there and exactly through out[]). */
#include <stdint.h>

double many_args(int8_t a, uint16_t b, int32_t c, int64_t d, float e, double f,
                 const int32_t *p, float g, int8_t h, uint16_t i, double j, int64_t k,
                 double *out, int32_t l, double m, float o, int64_t q, double r,
                 float s, double t) {
    out[0] = (double)a;
    out[1] = (double)b;
    out[2] = (double)c;
    out[3] = (double)d;
    out[4] = (double)e;
    out[5] = (double)f;
    out[6] = (double)(p[0] + p[1]);
    out[7] = (double)g;
    out[8] = (double)h;
    out[9] = (double)i;
    out[10] = (double)j;
    out[11] = (double)k;
    out[12] = (double)l;
    out[13] = (double)m;
    out[14] = (double)o;
    out[15] = (double)q;
    out[16] = (double)r;
    out[17] = (double)s;
    out[18] = (double)t;
    return (double)a + 2.0 * b + 3.0 * c + 4.0 * (double)(d % 65536) + 5.0 * e + 6.0 * f +
           7.0 * (p[0] - p[1]) + 8.0 * g + 9.0 * h + 10.0 * i + 11.0 * j +
           12.0 * (double)(k % 65536) + 13.0 * l + 14.0 * m + 15.0 * o + 16.0 * (double)q +
           17.0 * r + 18.0 * s + 19.0 * t;
}
