/* fused.h -- the record of a fused elementwise node: a small register
 * program run over blocks of the output, one pass over memory. */
#ifndef ONEFLOW_GRAPH_FUSED_H
#define ONEFLOW_GRAPH_FUSED_H
#include "graph.h"

enum { FUSED_UNARY = 0, FUSED_BINARY = 1, FUSED_CLAMP = 2, FUSED_LEAKY = 3, FUSED_CAST = 4 };
enum { FUSED_MAX_OPS = 48, FUSED_MAX_IN = 16 };

/* Registers: [0, nin) the inputs, [nin, nin + nconst) constants,
 * [nin + nconst, ...) one per instruction (instruction i writes register
 * nin + nconst + i); the last instruction's result is the output.
 * Values are of the program's float dtype, or bool: comparisons make bool,
 * FUSED_CAST turns bool into the float dtype (relu's backward mask). */
typedef struct {
  int32_t kind, op;
  int32_t a, b;          /* operand registers (b unused by one-operand kinds) */
  int32_t out_bool, pad_;
  double p0, p1;         /* clamp bounds (NaN: none) / leaky slope */
} fused_inst;

typedef struct {
  int32_t nops, nin, nconst, dtype;
  int32_t into;          /* input the output is written into, or -1 */
  int32_t ndim;
  int32_t in_bool[FUSED_MAX_IN];   /* input k is bool (else the float dtype) */
  int64_t shape[OF_MAX_DIMS];
  double consts[FUSED_MAX_OPS];
  fused_inst ops[FUSED_MAX_OPS];
} fused_prog;

int32_t of_fused_into(const of_gnode *n);
void of_fused_set_into(of_gnode *n, int32_t k);
#endif
