/* Sixteen mixed-type arguments: more integer/pointer and more floating-point
 * arguments than any supported ABI has registers, so some travel on the stack. */
#include <stdint.h>

double many_args(int8_t a, uint16_t b, int32_t c, int64_t d, float e, double f,
                 const int32_t *p, float g, int8_t h, uint16_t i, double j, int64_t k,
                 float *out, int32_t l, double m, float o, int64_t q, double r,
                 float s, double t) {
    out[0] = (float)a;
    out[1] = (float)b;
    out[2] = (float)c;
    out[3] = (float)d;
    out[4] = e;
    out[5] = (float)f;
    out[6] = (float)(p[0] + p[1]);
    out[7] = g;
    out[8] = (float)h;
    out[9] = (float)i;
    out[10] = (float)j;
    out[11] = (float)k;
    out[12] = (float)l;
    out[13] = (float)m;
    out[14] = o;
    out[15] = (float)q;
    out[16] = (float)r;
    out[17] = s;
    out[18] = (float)t;
    return (double)a + 2.0 * b + 3.0 * c + 4.0 * (double)d + 5.0 * e + 6.0 * f +
           7.0 * (p[0] - p[1]) + 8.0 * g + 9.0 * h + 10.0 * i + 11.0 * j +
           12.0 * (double)k + 13.0 * l + 14.0 * m + 15.0 * o + 16.0 * (double)q +
           17.0 * r + 18.0 * s + 19.0 * t;
}
