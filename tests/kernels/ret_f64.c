/* Returns a double: compensated (Kahan) summation of f64 values scaled by a double
 * argument. No -ffast-math, so the compensation stays and the result is bit-exact
 * (x * scale is exact for a power-of-two scale, so FMA contraction cannot change it). */
double kahan_f64(const double *x, int n, double scale) {
    double sum = 0.0, comp = 0.0;
    for (int i = 0; i < n; i++) {
        double y = x[i] * scale - comp;
        double t = sum + y;
        comp = (t - sum) - y;
        sum = t;
    }
    return sum;
}
