/* A C host embedding OneFlow-Lua two ways:
 *   1. straight through the C API (oneflow.h), no Lua involved;
 *   2. running a Lua script in an embedded LuaJIT state, handing it a tensor
 *      built in C and reading back the tensor the script returns.
 * Usage: embed_example script.lua   (built and run by `make test`) */
#include <oneflow/oneflow.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>

#ifndef OF_SOURCE_DIR
#define OF_SOURCE_DIR "."
#endif

static int fail(const char *what) {
  fprintf(stderr, "embed: %s: %s\n", what, of_last_error());
  return 1;
}

static int c_api_demo(void) {
  int64_t shape[2] = {2, 3};
  of_tensor *x, *y, *z;
  if (of_arange(0, 6, 1, OF_FLOAT32, OF_CPU, &x) != OF_OK) return fail("arange");
  if (of_reshape(x, shape, 2, &y) != OF_OK) return fail("reshape");
  if (of_binary_scalar(OF_MUL, y, 10.0, 0, NULL, &z) != OF_OK) return fail("mul");
  const float *p = of_tensor_data(z);
  printf("C API: 10 * arange(6) as 2x3 -> [%g %g %g; %g %g %g]\n", p[0], p[1], p[2], p[3],
         p[4], p[5]);
  /* bad input is a status code and a message, never an abort */
  of_tensor *bad;
  int64_t other[1] = {4};
  of_tensor *w;
  if (of_zeros(other, 1, OF_FLOAT32, OF_CPU, &w) != OF_OK) return fail("zeros");
  if (of_binary(OF_ADD, y, w, NULL, &bad) == OF_OK) return fail("expected a shape error");
  printf("C API: error reported: %s\n", of_last_error());
  of_tensor_release(w);
  of_tensor_release(z);
  of_tensor_release(y);
  of_tensor_release(x);
  return 0;
}

static int lua_demo(const char *script) {
  lua_State *L = luaL_newstate();
  if (!L) return fail("luaL_newstate");
  luaL_openlibs(L);
  /* make `require 'oneflow'` find the modules of this checkout */
  lua_getglobal(L, "package");
  lua_pushstring(L, OF_SOURCE_DIR "/lua/?.lua;" OF_SOURCE_DIR "/lua/?/init.lua;");
  lua_getfield(L, -2, "path");
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);

  int64_t n = 4;
  of_tensor *input;
  if (of_full(&n, 1, 1.5, OF_FLOAT64, OF_CPU, &input) != OF_OK) return fail("full");
  lua_pushlightuserdata(L, input);   /* the script takes its own reference */
  lua_setglobal(L, "host_tensor");
  of_tensor *result = NULL;          /* the script stores a retained handle here */
  lua_pushlightuserdata(L, &result);
  lua_setglobal(L, "host_result");

  int rc = 0;
  if (luaL_loadfile(L, script) || lua_pcall(L, 0, 0, 0)) {
    fprintf(stderr, "embed: script failed: %s\n", lua_tostring(L, -1));
    rc = 1;
  } else {
    if (!result) {
      fprintf(stderr, "embed: script returned no tensor handle\n");
      rc = 1;
    } else {
      double v[4];
      of_tensor_to_doubles(result, v, 4);
      printf("Lua returned: [%g %g %g %g]\n", v[0], v[1], v[2], v[3]);
      rc = !(v[0] == 4.5 && v[3] == 4.5);
      of_tensor_release(result);
    }
  }
  lua_close(L);   /* releases every tensor the script still held */
  of_tensor_release(input);
  const of_memory_stats *s = of_memory_stats_get(OF_CPU);
  printf("bytes still held after lua_close: %lld\n", (long long)s->current_bytes);
  return rc || s->current_bytes != 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s script.lua\n", argv[0]);
    return 2;
  }
  if (c_api_demo()) return 1;
  return lua_demo(argv[1]);
}
