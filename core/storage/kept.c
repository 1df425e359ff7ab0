/* kept.c -- bounded tables of what kernels keep between calls: a weight's
 * Winograd transform (winograd.c), an int8 weight packed for the integer
 * kernels (quant.c), autocast's low-precision copy of a parameter (amp.c).
 *
 * Each keeps something made from a tensor whose numbers change only with
 * its storage's version (a parameter under no_grad, a graph's frozen
 * result), so an entry is keyed by that storage's id (key[0]), its version
 * (key[1]) and the rest of what the made thing depends on (offset, shape,
 * tile size...). An entry whose key differs from a new one's in the
 * version alone is an older copy of the same thing and goes when the new
 * one comes in: a weight updated between calls keeps one copy. Past the
 * table's slots or bytes the least recently used go. Entries are
 * refcounted (the table's reference and each user's), so a thread still
 * using an evicted entry keeps it until it lets go; an entry is freed
 * (its free function) outside the table's lock.
 *
 * oneDNN's reordered weights (device/dnnl.c) keep their own table: they
 * live under the lock that runs the primitives, are keyed by oneDNN's
 * memory descriptors and reuse a freed slot's buffer. */
#include "../internal.h"
#include <stdlib.h>

static bool same_but_version(const of_kept *a, const of_kept *b) {
  return a->key[0] == b->key[0] &&
         !memcmp(a->key + 2, b->key + 2, sizeof(int64_t) * (OF_KEPT_KEY - 2));
}

/* takes slot i's entry out of the table onto *drop (locked) */
static void take_out(of_kept_table *t, int32_t i, of_kept **drop) {
  of_kept *e = t->slot[i];
  t->slot[i] = NULL;
  t->bytes -= e->bytes;
  if (--e->refs == 0) e->next = *drop, *drop = e;
}

static void free_all(of_kept *drop) {
  while (drop) {
    of_kept *n = drop->next;
    drop->free(drop);
    drop = n;
  }
}

of_kept *of_kept_find(of_kept_table *t, const int64_t *key) {
  of_kept *e = NULL;
  pthread_mutex_lock(&t->mu);
  for (int32_t i = 0; i < t->n && !e; i++)
    if (t->slot[i] && !memcmp(t->slot[i]->key, key, sizeof t->slot[i]->key)) {
      e = t->slot[i];
      e->refs++;
      e->used = ++t->tick;
    }
  pthread_mutex_unlock(&t->mu);
  return e;
}

void of_kept_put(of_kept_table *t, of_kept *e) {
  if (e->bytes > t->max_bytes) return;   /* the caller's alone: freed on release */
  of_kept *drop = NULL;
  pthread_mutex_lock(&t->mu);
  int32_t free_slot = -1;
  for (int32_t i = 0; i < t->n; i++) {
    if (t->slot[i] && same_but_version(t->slot[i], e)) take_out(t, i, &drop);
    if (!t->slot[i] && free_slot < 0) free_slot = i;
  }
  while (free_slot < 0 || t->bytes + e->bytes > t->max_bytes) {
    int32_t lru = -1;
    for (int32_t i = 0; i < t->n; i++)
      if (t->slot[i] && (lru < 0 || t->slot[i]->used < t->slot[lru]->used)) lru = i;
    if (lru < 0) break;
    take_out(t, lru, &drop);
    if (free_slot < 0) free_slot = lru;
  }
  e->refs++;
  e->used = ++t->tick;
  t->slot[free_slot] = e;
  t->bytes += e->bytes;
  pthread_mutex_unlock(&t->mu);
  free_all(drop);
}

void of_kept_release(of_kept_table *t, of_kept *e) {
  if (!e) return;
  pthread_mutex_lock(&t->mu);
  const bool last = --e->refs == 0;
  pthread_mutex_unlock(&t->mu);
  if (last) e->free(e);
}

void of_kept_forget(of_kept_table *t, int64_t sid, bool all) {
  of_kept *drop = NULL;
  pthread_mutex_lock(&t->mu);
  for (int32_t i = 0; i < t->n; i++)
    if (t->slot[i] && (all || t->slot[i]->key[0] == sid)) take_out(t, i, &drop);
  pthread_mutex_unlock(&t->mu);
  free_all(drop);
}
