/* special_eval.h -- flow.special's scalar dispatch: of_special1(fn, x, p) and
 * of_special2(fn, x, y) over PyTorch's scalar code (special_math.h), in
 * float64. Included by core/ops/special.c (the CPU loops) and by
 * cuda/elementwise.cu (the same functions as device code, kinds
 * OF_EWK_SPECIAL1/2 of the elementwise kernel). */
#ifndef ONEFLOW_SPECIAL_EVAL_H
#define ONEFLOW_SPECIAL_EVAL_H
#include "oneflow/oneflow.h"
#include "special_math.h"

/* in cuda/elementwise.cu only the device side of these is called */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

/* a polynomial's degree as PyTorch converts it: non-finite -> -1 (value 0) */
OF_SPF int64_t of_special_degree(double n) {
  if (!isfinite(n) || n > 9.2e18 || n < -9.2e18) return -1;
  return (int64_t)n;
}

#define SQRT_2PI 2.50662827463100050242
#define INV_SQRT_PI 0.56418958354775628694807945156

OF_SPF double of_special_polygamma(int n, double x) {
  if (n == 0) return calc_digamma(x);
  if (n == 1) return trigamma(x);
  return calc_polygamma(x, n);
}

OF_SPF double of_special1(int32_t fn, double x, double p) {
  switch (fn) {
    case OF_SP_ERFCX: return calc_erfcx(x);
    case OF_SP_ERFINV: return calc_erfinv(x);
    case OF_SP_GAMMALN: return lgamma(x);
    case OF_SP_DIGAMMA: return calc_digamma(x);
    case OF_SP_POLYGAMMA: return of_special_polygamma((int)p, x);
    case OF_SP_I0: return calc_i0(x);
    case OF_SP_I0E: return calc_i0e(x);
    case OF_SP_I1: return calc_i1(x);
    case OF_SP_I1E: return calc_i1e(x);
    case OF_SP_NDTRI: return calc_ndtri(x);
    case OF_SP_LOG_NDTR: return calc_log_ndtr(x);
    case OF_SP_BESSEL_J0: return bessel_j0_forward(x);
    case OF_SP_BESSEL_J1: return bessel_j1_forward(x);
    case OF_SP_BESSEL_Y0: return bessel_y0_forward(x);
    case OF_SP_BESSEL_Y1: return bessel_y1_forward(x);
    case OF_SP_MODIFIED_BESSEL_I0: return modified_bessel_i0_forward(x);
    case OF_SP_MODIFIED_BESSEL_I1: return modified_bessel_i1_forward(x);
    case OF_SP_MODIFIED_BESSEL_K0: return modified_bessel_k0_forward(x);
    case OF_SP_MODIFIED_BESSEL_K1: return modified_bessel_k1_forward(x);
    case OF_SP_SCALED_MODIFIED_BESSEL_K0: return scaled_modified_bessel_k0_forward(x);
    case OF_SP_SCALED_MODIFIED_BESSEL_K1: return scaled_modified_bessel_k1_forward(x);
    case OF_SP_SPHERICAL_BESSEL_J0: return spherical_bessel_j0_forward(x);
    case OF_SP_AIRY_AI: return airy_ai_forward(x);
    /* derivatives, for the backward rules */
    case OF_SP_D_ERFCX: return 2 * x * calc_erfcx(x) - 2 * INV_SQRT_PI;
    case OF_SP_D_ERFINV: {
      double e = calc_erfinv(x);
      return 0.5 / INV_SQRT_PI * exp(e * e);
    }
    case OF_SP_D_I0E: return calc_i1e(x) - (x > 0 ? 1 : x < 0 ? -1 : 0) * calc_i0e(x);
    case OF_SP_D_I1: return x == 0 ? 0.5 : calc_i0(x) - calc_i1(x) / x;
    case OF_SP_D_I1E:
      return x == 0 ? 0.5 : calc_i0e(x) - calc_i1e(x) * ((x > 0 ? 1 : -1) + 1 / x);
    case OF_SP_D_NDTRI: {
      double q = calc_ndtri(x);
      return SQRT_2PI * exp(0.5 * q * q);
    }
    case OF_SP_D_LOG_NDTR: return exp(-0.5 * x * x - calc_log_ndtr(x)) / SQRT_2PI;
    default: return NAN;
  }
}

OF_SPF double of_special2(int32_t fn, double x, double y) {
  switch (fn) {
    case OF_SP_ZETA: return zeta(x, y);
    case OF_SP_GAMMAINC: return calc_igamma(x, y);
    case OF_SP_GAMMAINCC: return calc_igammac(x, y);
    case OF_SP_CHEBYSHEV_T: return chebyshev_polynomial_t_forward(x, of_special_degree(y));
    case OF_SP_CHEBYSHEV_U: return chebyshev_polynomial_u_forward(x, of_special_degree(y));
    case OF_SP_CHEBYSHEV_V: return chebyshev_polynomial_v_forward(x, of_special_degree(y));
    case OF_SP_CHEBYSHEV_W: return chebyshev_polynomial_w_forward(x, of_special_degree(y));
    case OF_SP_SHIFTED_CHEBYSHEV_T: return shifted_chebyshev_polynomial_t_forward(x, of_special_degree(y));
    case OF_SP_SHIFTED_CHEBYSHEV_U: return shifted_chebyshev_polynomial_u_forward(x, of_special_degree(y));
    case OF_SP_SHIFTED_CHEBYSHEV_V: return shifted_chebyshev_polynomial_v_forward(x, of_special_degree(y));
    case OF_SP_SHIFTED_CHEBYSHEV_W: return shifted_chebyshev_polynomial_w_forward(x, of_special_degree(y));
    case OF_SP_HERMITE_H: return hermite_polynomial_h_forward(x, of_special_degree(y));
    case OF_SP_HERMITE_HE: return hermite_polynomial_he_forward(x, of_special_degree(y));
    case OF_SP_LAGUERRE_L: return laguerre_polynomial_l_forward(x, of_special_degree(y));
    case OF_SP_LEGENDRE_P: return legendre_polynomial_p_forward(x, of_special_degree(y));
    /* d/dy P(x, y) = exp(-y) y^(x-1) / Gamma(x) */
    case OF_SP_D_GAMMAINC: return exp(-y + (x - 1) * log(y) - lgamma(x));
    default: return NAN;
  }
}

#pragma GCC diagnostic pop
#endif
