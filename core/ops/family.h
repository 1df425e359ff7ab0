/* family.h -- shorthands for the op family files (core/ops/<family>.c):
 * the op table and records (op.h) and the macros their entry points and
 * run functions are written with. Only family files include it. */
#ifndef ONEFLOW_OPS_FAMILY_H
#define ONEFLOW_OPS_FAMILY_H
#include "op.h"

/* Frees the int8 kernels' packed weights (quant.c), all of them or those of
 * the weight on storage sid; of_release_kernel_caches and
 * of_forget_kept_weight (amp.c) call them. */
void of_quant_release_cached(void);
void of_quant_forget_weight(int64_t sid);
/* Frees the kept Winograd weight transforms (winograd.c), all of them or
 * those of the weight on storage sid (of_forget_kept_weight, amp.c). */
void of_wino_release_cached(void);
void of_wino_forget_weight(int64_t sid);

/* ---- helpers for entry points and run functions ---- */
#define OF_ATTRS(T) const T *a = (const T *)n->attrs
#define OF_ZERO(a) memset(&(a), 0, sizeof(a))
/* a loaded record that does not hold up names the op */
of_status of_op_bad_record(int32_t op, const char *what);
#define OF_NEED(cond, what) do { if (!(cond)) return of_op_bad_record(n->op, what); } while (0)
/* one-result call in a run function: outs[0] = result */
#define OF_RUN1(CALL)                    \
  do {                                \
    of_tensor *r_ = NULL;             \
    of_status st_ = (CALL);           \
    if (st_ == OF_OK) outs[0] = r_;   \
    return st_;                       \
  } while (0)
#define OF_R (&r_)

/* Autocast (ops/amp.c): the outermost call casts its inputs by the op's
 * class and calls the entry point again with autocast off, so the casts are
 * ordinary to_dtype ops (recorded while tracing, with their backward). */
#define AMP(CLASS, CALL, ...)                                                    \
  do {                                                                           \
    if (__builtin_expect(of_amp_tls != 0, 0)) {                                  \
      of_tensor *amp_in_[] = {__VA_ARGS__};                                      \
      enum { AMP_N_ = sizeof amp_in_ / sizeof *amp_in_ };                        \
      of_tensor *A_[AMP_N_];                                                     \
      int32_t amp_saved_;                                                        \
      of_status amp_st_ = of_amp_begin(CLASS, amp_in_, A_, AMP_N_, &amp_saved_); \
      if (amp_st_ != OF_OK) return amp_st_;                                      \
      amp_st_ = (CALL);                                                          \
      of_amp_end(amp_in_, A_, AMP_N_, amp_saved_);                               \
      return amp_st_;                                                            \
    }                                                                            \
  } while (0)

/* y (a kernel's result, consumed) -> *out in dtype dt: y itself when it
 * already is, else a cast copy */
static inline of_status of_finish_dtype(of_tensor *y, of_dtype dt, of_tensor **out) {
  if (y->dtype == dt) {
    *out = y;
    return OF_OK;
  }
  of_status st = of_cast_data(y, dt, out);
  of_tensor_release(y);
  return st;
}

/* conv and pool records: an optional array (bit set in `has`) or NULL */
#define OF_OPT(bit, arr) ((a->has & (bit)) ? a->arr : NULL)
#endif
