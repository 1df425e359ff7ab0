/* embed_cdef: turns oneflow.h into a C file defining of_cdef(), the text
 * LuaJIT's ffi.cdef gets. Preprocessor lines and the C++ guard blocks are
 * dropped; everything else is kept verbatim, so there is no second copy of
 * the API to keep in step. Usage: embed_cdef in.h out.c */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: embed_cdef header.h out.c\n");
    return 2;
  }
  FILE *in = fopen(argv[1], "r"), *out = fopen(argv[2], "w");
  if (!in || !out) {
    perror("embed_cdef");
    return 1;
  }
  fputs("/* generated from oneflow.h by tools/embed_cdef.c -- do not edit */\n"
        "const char *of_cdef(void);\nconst char *of_cdef(void) {\n  return\n",
        out);
  char line[4096];
  int in_cplusplus = 0;
  while (fgets(line, sizeof line, in)) {
    const char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (strncmp(p, "#ifdef __cplusplus", 18) == 0) { in_cplusplus = 1; continue; }
    if (in_cplusplus) { if (strncmp(p, "#endif", 6) == 0) in_cplusplus = 0; continue; }
    if (*p == '#') continue;
    fputs("    \"", out);
    for (const char *c = line; *c && *c != '\n'; c++) {
      if (*c == '"' || *c == '\\') fputc('\\', out);
      fputc(*c, out);
    }
    fputs("\\n\"\n", out);
  }
  fputs("  ;\n}\n", out);
  fclose(in);
  return fclose(out) == 0 ? 0 : 1;
}
