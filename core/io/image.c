/* image.c -- JPEG (libjpeg / libjpeg-turbo) and PNG (libpng) decoding and
 * encoding of uint8 [H, W, C] tensors.
 *
 * Hostile input: neither library may exit or print. libjpeg's error_exit
 * and libpng's error callback longjmp back to the setjmp of the C function
 * that called into the library (never across an FFI frame); that function
 * frees what it allocated and returns a status. State touched after setjmp
 * lives in a struct whose address is taken, so it is in memory, not in a
 * register that longjmp could roll back. Sizes are checked before any
 * allocation (sides up to 32768, 1 GiB of pixels by default; of_image_set_limits
 * changes both and the file size limit), and every read from the
 * input buffer is bounds-checked by the source managers.
 *
 * Without libjpeg or libpng at build time (OF_HAVE_JPEG / OF_HAVE_PNG unset)
 * the functions return OF_ERR_STATE with "built without libjpeg/libpng". */
#include "internal.h"
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef OF_HAVE_JPEG
#include <jpeglib.h>
#include <jerror.h>
#endif
#ifdef OF_HAVE_PNG
#include <png.h>
#endif

/* The limits (of_image_set_limits): a side, the decoded bytes H * W * C, the
 * file of_image_read reads. Read and written with atomics: a DataLoader
 * thread or a server thread may decode while another sets them. */
#define IMG_DEF_SIDE ((int64_t)32768)
#define IMG_DEF_BYTES ((int64_t)1 << 30)
#define IMG_DEF_FILE ((int64_t)1 << 30)
#define IMG_CAP_SIDE ((int64_t)0x7fffffff)   /* libpng's png_uint_32 user limit */
#define IMG_CAP_BYTES ((int64_t)1 << 48)     /* the loaders' tensor bound */
static int64_t lim_side = IMG_DEF_SIDE, lim_bytes = IMG_DEF_BYTES, lim_file = IMG_DEF_FILE;
#define LIM(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

of_status of_image_set_limits(int64_t max_side, int64_t max_bytes, int64_t max_file_bytes) {
  const char *what = NULL;
  int64_t v = 0, cap = 0;
  if (max_side < 0 || max_side > IMG_CAP_SIDE) what = "max_side", v = max_side, cap = IMG_CAP_SIDE;
  else if (max_bytes < 0 || max_bytes > IMG_CAP_BYTES)
    what = "max_bytes", v = max_bytes, cap = IMG_CAP_BYTES;
  else if (max_file_bytes < 0 || max_file_bytes > IMG_CAP_BYTES)
    what = "max_file_bytes", v = max_file_bytes, cap = IMG_CAP_BYTES;
  if (what)
    return of_fail(OF_ERR_ARG, "image_set_limits: %s must be 1..%lld (0 keeps the current limit), "
                   "got %lld", what, (long long)cap, (long long)v);
  if (max_side) __atomic_store_n(&lim_side, max_side, __ATOMIC_RELAXED);
  if (max_bytes) __atomic_store_n(&lim_bytes, max_bytes, __ATOMIC_RELAXED);
  if (max_file_bytes) __atomic_store_n(&lim_file, max_file_bytes, __ATOMIC_RELAXED);
  return OF_OK;
}

void of_image_get_limits(int64_t *max_side, int64_t *max_bytes, int64_t *max_file_bytes) {
  if (max_side) *max_side = LIM(lim_side);
  if (max_bytes) *max_bytes = LIM(lim_bytes);
  if (max_file_bytes) *max_file_bytes = LIM(lim_file);
}

int32_t of_image_supported(of_image_format fmt) {
#ifdef OF_HAVE_PNG
  if (fmt == OF_IMAGE_PNG) return 1;
#endif
#ifdef OF_HAVE_JPEG
  if (fmt == OF_IMAGE_JPEG) return 1;
#endif
  (void)fmt;
  return 0;
}

static of_status check_dims(const char *what, int64_t w, int64_t h, int64_t c) {
  if (w <= 0 || h <= 0)
    return of_fail(OF_ERR_IO, "corrupt %s: image size %lldx%lld", what, (long long)w, (long long)h);
  int64_t side = LIM(lim_side), bytes = LIM(lim_bytes);
  if (w > side || h > side)
    return of_fail(OF_ERR_ARG, "%s of %lldx%lld pixels is larger than the %lldx%lld limit "
                   "(of_image_set_limits, vision.io.set_image_limits: max_side)", what,
                   (long long)w, (long long)h, (long long)side, (long long)side);
  int64_t wh = 0, whc = 0;
  if (!of_mul_ok(w, h, &wh) || !of_mul_ok(wh, c, &whc) || whc > bytes)
    return of_fail(OF_ERR_ARG, "%s of %lldx%lldx%lld bytes is larger than the %lld-byte limit "
                   "(of_image_set_limits, vision.io.set_image_limits: max_bytes)", what,
                   (long long)h, (long long)w, (long long)c, (long long)bytes);
  return OF_OK;
}

/* The decoded size a file of n bytes can justify: the pixel buffer is
 * allocated from the header's numbers before any pixel data is read, so a
 * 100-byte header must not cost a gigabyte. PNG: deflate expands at most
 * 1032:1 (units: raw row bytes plus a filter byte per row). Huffman-coded JPEG: every
 * 8x8 block of every component takes at least one bit (its DC code), so a
 * byte covers at most 8 blocks = 512 pixels; arithmetic coding can go below
 * a bit per block (rare; allowed 64 times more) (units: pixels). Small
 * images always pass. */
static of_status check_justified(const char *what, int64_t units, int64_t n, int64_t ratio) {
  if (units <= ((int64_t)1 << 22) || units / ratio <= n) return OF_OK;
  return of_fail(OF_ERR_IO, "corrupt %s: the header's image size cannot come from a file of "
                 "%lld bytes (truncated file?)", what, (long long)n);
}

/* ======================================================================= JPEG */
#ifdef OF_HAVE_JPEG
typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
} jerr_t;

static void jerr_exit(j_common_ptr c) {
  jerr_t *e = (jerr_t *)c->err;
  c->err->format_message(c, e->msg);
  longjmp(e->jb, 1);
}

/* Warnings are counted, not printed; a truncated stream (libjpeg would
 * pad it with a fake end marker and return grey rows) is an error. */
static void jerr_emit(j_common_ptr c, int level) {
  if (level >= 0) return;
  if (c->err->msg_code == JWRN_JPEG_EOF) jerr_exit(c);
  c->err->num_warnings++;
}

static void jerr_output(j_common_ptr c) { (void)c; }

static void jerr_setup(jerr_t *e) {
  jpeg_std_error(&e->pub);
  e->pub.error_exit = jerr_exit;
  e->pub.emit_message = jerr_emit;
  e->pub.output_message = jerr_output;
  e->msg[0] = 0;
}

typedef struct {
  struct jpeg_decompress_struct cinfo;
  jerr_t err;
  of_tensor *img;
  JSAMPLE *row;   /* CMYK scratch row */
} jdec_t;

static of_status jpeg_decode(const uint8_t *data, int64_t n, of_tensor **out) {
  jdec_t *s = calloc(1, sizeof *s);
  if (!s) return of_fail(OF_ERR_OOM, "out of memory");
  s->cinfo.err = &s->err.pub;
  jerr_setup(&s->err);
  if (setjmp(s->err.jb)) {
    jpeg_destroy_decompress(&s->cinfo);
    if (s->img) of_tensor_release(s->img);
    free(s->row);
    of_status st = of_fail(OF_ERR_IO, "corrupt JPEG (%s)", s->err.msg);
    free(s);
    return st;
  }
  jpeg_create_decompress(&s->cinfo);
  jpeg_mem_src(&s->cinfo, (const unsigned char *)data, (unsigned long)n);
  jpeg_read_header(&s->cinfo, TRUE);
  of_status st = OF_OK;
  int cmyk = 0, ch = 3;
  switch (s->cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: s->cinfo.out_color_space = JCS_GRAYSCALE; ch = 1; break;
    case JCS_CMYK: case JCS_YCCK: s->cinfo.out_color_space = JCS_CMYK; cmyk = 1; break;
    default: s->cinfo.out_color_space = JCS_RGB; break;
  }
  st = check_dims("JPEG", s->cinfo.image_width, s->cinfo.image_height, cmyk ? 4 : ch);
  if (st == OF_OK)
    st = check_justified("JPEG", (int64_t)s->cinfo.image_width * s->cinfo.image_height, n,
                         s->cinfo.arith_code ? 512 * 64 : 512);
  if (st == OF_OK) {
    jpeg_start_decompress(&s->cinfo);
    int64_t w = s->cinfo.output_width, h = s->cinfo.output_height;
    if (s->cinfo.output_components != (cmyk ? 4 : ch)) {
      st = of_fail(OF_ERR_IO, "corrupt JPEG (%d colour components)", s->cinfo.output_components);
    } else {
      int64_t shape[3] = {h, w, ch};
      st = of_tensor_new(shape, 3, OF_UINT8, OF_CPU, &s->img);
      if (st == OF_OK && cmyk) {
        s->row = malloc((size_t)w * 4);
        if (!s->row) st = of_fail(OF_ERR_OOM, "out of memory for a JPEG row");
      }
    }
    while (st == OF_OK && s->cinfo.output_scanline < s->cinfo.output_height) {
      uint8_t *dst = (uint8_t *)of_ptr(s->img) + (int64_t)s->cinfo.output_scanline * w * ch;
      JSAMPROW row = cmyk ? s->row : dst;
      if (jpeg_read_scanlines(&s->cinfo, &row, 1) != 1) {
        st = of_fail(OF_ERR_IO, "corrupt JPEG (no scanline data)");
        break;
      }
      if (cmyk) {
        /* Adobe writes CMYK inverted (255 = no ink), as almost all CMYK
         * JPEGs are; without the Adobe marker take them as plain. */
        int inv = s->cinfo.saw_Adobe_marker;
        for (int64_t x = 0; x < w; x++) {
          int k = s->row[4 * x + 3];
          if (!inv) k = 255 - k;
          for (int c = 0; c < 3; c++) {
            int v = s->row[4 * x + c];
            if (!inv) v = 255 - v;
            dst[3 * x + c] = (uint8_t)((v * k + 127) / 255);
          }
        }
      }
    }
    if (st == OF_OK) jpeg_finish_decompress(&s->cinfo);
  }
  jpeg_destroy_decompress(&s->cinfo);
  free(s->row);
  if (st != OF_OK) {
    if (s->img) of_tensor_release(s->img);
  } else {
    *out = s->img;
  }
  free(s);
  return st;
}

typedef struct {
  struct jpeg_compress_struct cinfo;
  jerr_t err;
  unsigned char *buf;
  unsigned long size;
  int quality;
} jenc_t;

static of_status jpeg_encode(const uint8_t *px, int64_t h, int64_t w, int64_t c, int32_t quality,
                             of_tensor **out) {
  if (c != 1 && c != 3)
    return of_fail(OF_ERR_SHAPE, "JPEG needs 1 or 3 channels, got %lld (drop the alpha channel first)",
                   (long long)c);
  if (w > 65500 || h > 65500)
    return of_fail(OF_ERR_ARG, "JPEG sides are at most 65500 pixels, got %lldx%lld",
                   (long long)w, (long long)h);
  if (quality <= 0) quality = 75;
  if (quality > 100)
    return of_fail(OF_ERR_ARG, "JPEG quality must be 1..100, got %d", (int)quality);
  jenc_t *s = calloc(1, sizeof *s);
  if (!s) return of_fail(OF_ERR_OOM, "out of memory");
  s->quality = quality;
  s->cinfo.err = &s->err.pub;
  jerr_setup(&s->err);
  if (setjmp(s->err.jb)) {
    jpeg_destroy_compress(&s->cinfo);
    free(s->buf);
    of_status st = of_fail(OF_ERR_IO, "JPEG encoder failed (%s)", s->err.msg);
    free(s);
    return st;
  }
  jpeg_create_compress(&s->cinfo);
  jpeg_mem_dest(&s->cinfo, &s->buf, &s->size);
  s->cinfo.image_width = (JDIMENSION)w;
  s->cinfo.image_height = (JDIMENSION)h;
  s->cinfo.input_components = (int)c;
  s->cinfo.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&s->cinfo);
  jpeg_set_quality(&s->cinfo, s->quality, TRUE);
  jpeg_start_compress(&s->cinfo, TRUE);
  while (s->cinfo.next_scanline < s->cinfo.image_height) {
    JSAMPROW row = (JSAMPROW)(px + (int64_t)s->cinfo.next_scanline * w * c);
    jpeg_write_scanlines(&s->cinfo, &row, 1);
  }
  jpeg_finish_compress(&s->cinfo);
  int64_t n = (int64_t)s->size;
  of_status st = of_tensor_new(&n, 1, OF_UINT8, OF_CPU, out);
  if (st == OF_OK) memcpy(of_ptr(*out), s->buf, (size_t)n);
  jpeg_destroy_compress(&s->cinfo);
  free(s->buf);
  free(s);
  return st;
}
#endif

/* ======================================================================= PNG */
#ifdef OF_HAVE_PNG
typedef struct {
  const uint8_t *data;
  size_t n, pos;
  char msg[256];
} pngio_t;

static void png_err_fn(png_structp p, png_const_charp m) {
  pngio_t *io = png_get_error_ptr(p);
  snprintf(io->msg, sizeof io->msg, "%s", m ? m : "unknown error");
  png_longjmp(p, 1);
}

static void png_warn_fn(png_structp p, png_const_charp m) { (void)p; (void)m; }

static void png_read_mem(png_structp p, png_bytep buf, png_size_t len) {
  pngio_t *io = png_get_io_ptr(p);
  if (len > io->n - io->pos) png_error(p, "unexpected end of data (truncated file)");
  memcpy(buf, io->data + io->pos, len);
  io->pos += len;
}

typedef struct {
  png_structp png;
  png_infop info;
  pngio_t io;
  of_tensor *img;
  png_bytep *rows;
} pdec_t;

static of_status png_decode(const uint8_t *data, int64_t n, of_tensor **out) {
  pdec_t *s = calloc(1, sizeof *s);
  if (!s) return of_fail(OF_ERR_OOM, "out of memory");
  s->io.data = data;
  s->io.n = (size_t)n;
  s->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s->io, png_err_fn, png_warn_fn);
  if (s->png) s->info = png_create_info_struct(s->png);
  if (!s->png || !s->info) {
    png_destroy_read_struct(s->png ? &s->png : NULL, NULL, NULL);
    free(s);
    return of_fail(OF_ERR_OOM, "out of memory for the PNG decoder");
  }
  if (setjmp(png_jmpbuf(s->png))) {
    png_destroy_read_struct(&s->png, &s->info, NULL);
    if (s->img) of_tensor_release(s->img);
    free(s->rows);
    of_status st = of_fail(OF_ERR_IO, "corrupt PNG (%s)", s->io.msg);
    free(s);
    return st;
  }
  /* libpng's own side limit only as a backstop (its message would be "Invalid
   * IHDR data"): the sides are checked against ours right after the header,
   * before libpng allocates any row */
  png_set_user_limits(s->png, (png_uint_32)IMG_CAP_SIDE, (png_uint_32)IMG_CAP_SIDE);
  png_set_chunk_cache_max(s->png, 1000);
  png_set_chunk_malloc_max(s->png, 64u << 20);
  png_set_read_fn(s->png, &s->io, png_read_mem);
  png_read_info(s->png, s->info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, ctype = 0;
  png_get_IHDR(s->png, s->info, &w, &h, &depth, &ctype, NULL, NULL, NULL);
  of_status st = check_dims("PNG", w, h, 1);
  if (st != OF_OK) {
    png_destroy_read_struct(&s->png, &s->info, NULL);
    free(s);
    return st;
  }
  int64_t raw_row = (int64_t)png_get_rowbytes(s->png, s->info);   /* before the expansions */
  if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(s->png);
  if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(s->png);
  if (png_get_valid(s->png, s->info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(s->png);
  if (depth == 16) png_set_scale_16(s->png);
  png_set_interlace_handling(s->png);
  png_read_update_info(s->png, s->info);
  int64_t ch = png_get_channels(s->png, s->info);
  st = check_dims("PNG", w, h, ch);
  if (st == OF_OK)
    st = check_justified("PNG", (int64_t)h * (raw_row + 1), n, 1032);
  if (st == OF_OK && (ch < 1 || ch > 4 || (int64_t)png_get_rowbytes(s->png, s->info) != (int64_t)w * ch))
    st = of_fail(OF_ERR_IO, "corrupt PNG (unexpected row layout)");
  if (st == OF_OK) {
    int64_t shape[3] = {h, w, ch};
    st = of_tensor_new(shape, 3, OF_UINT8, OF_CPU, &s->img);
  }
  if (st == OF_OK) {
    s->rows = malloc(sizeof(png_bytep) * h);
    if (!s->rows) st = of_fail(OF_ERR_OOM, "out of memory for PNG rows");
  }
  if (st == OF_OK) {
    uint8_t *base = (uint8_t *)of_ptr(s->img);
    for (png_uint_32 y = 0; y < h; y++) s->rows[y] = base + (int64_t)y * w * ch;
    png_read_image(s->png, s->rows);
    png_read_end(s->png, NULL);
  }
  png_destroy_read_struct(&s->png, &s->info, NULL);
  free(s->rows);
  if (st != OF_OK) {
    if (s->img) of_tensor_release(s->img);
  } else {
    *out = s->img;
  }
  free(s);
  return st;
}

typedef struct {
  png_structp png;
  png_infop info;
  pngio_t io;   /* msg only */
  uint8_t *buf;
  size_t n, cap;
  png_bytep *rows;
} penc_t;

static void png_write_mem(png_structp p, png_bytep d, png_size_t len) {
  penc_t *s = png_get_io_ptr(p);
  if (len > s->cap - s->n) {
    size_t cap = s->cap ? s->cap : 4096;
    while (cap - s->n < len) {
      if (cap > SIZE_MAX / 2) png_error(p, "encoded image too large");
      cap *= 2;
    }
    uint8_t *nb = realloc(s->buf, cap);
    if (!nb) png_error(p, "out of memory");
    s->buf = nb;
    s->cap = cap;
  }
  memcpy(s->buf + s->n, d, len);
  s->n += len;
}

static void png_flush_mem(png_structp p) { (void)p; }

static of_status png_encode(const uint8_t *px, int64_t h, int64_t w, int64_t c, of_tensor **out) {
  static const int types[5] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                               PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
  if (c < 1 || c > 4)
    return of_fail(OF_ERR_SHAPE, "PNG needs 1 to 4 channels, got %lld", (long long)c);
  penc_t *s = calloc(1, sizeof *s);
  if (!s) return of_fail(OF_ERR_OOM, "out of memory");
  s->png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &s->io, png_err_fn, png_warn_fn);
  if (s->png) s->info = png_create_info_struct(s->png);
  if (!s->png || !s->info) {
    png_destroy_write_struct(s->png ? &s->png : NULL, NULL);
    free(s);
    return of_fail(OF_ERR_OOM, "out of memory for the PNG encoder");
  }
  if (setjmp(png_jmpbuf(s->png))) {
    png_destroy_write_struct(&s->png, &s->info);
    free(s->buf);
    free(s->rows);
    of_status st = of_fail(OF_ERR_IO, "PNG encoder failed (%s)", s->io.msg);
    free(s);
    return st;
  }
  png_set_write_fn(s->png, s, png_write_mem, png_flush_mem);
  png_set_IHDR(s->png, s->info, (png_uint_32)w, (png_uint_32)h, 8, types[c], PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(s->png, 6);
  of_status st = OF_OK;
  s->rows = malloc(sizeof(png_bytep) * (size_t)h);
  if (!s->rows) st = of_fail(OF_ERR_OOM, "out of memory for PNG rows");
  if (st == OF_OK) {
    for (int64_t y = 0; y < h; y++) s->rows[y] = (png_bytep)(px + y * w * c);
    png_write_info(s->png, s->info);
    png_write_image(s->png, s->rows);
    png_write_end(s->png, NULL);
    int64_t n = (int64_t)s->n;
    st = of_tensor_new(&n, 1, OF_UINT8, OF_CPU, out);
    if (st == OF_OK) memcpy(of_ptr(*out), s->buf, s->n);
  }
  png_destroy_write_struct(&s->png, &s->info);
  free(s->buf);
  free(s->rows);
  free(s);
  return st;
}
#endif

/* ======================================================================= API */
static const uint8_t PNG_SIG[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

/* Decodes without an op prefix in the message; wrappers add theirs. */
static of_status decode_any(const uint8_t *data, int64_t n, of_tensor **out) {
  if (n >= 8 && memcmp(data, PNG_SIG, 8) == 0) {
#ifdef OF_HAVE_PNG
    return png_decode(data, n, out);
#else
    return of_fail(OF_ERR_STATE, "PNG image, but liboneflow was built without libpng "
                   "(install libpng-dev and rebuild)");
#endif
  }
  if (n >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
#ifdef OF_HAVE_JPEG
    if ((uint64_t)n > ULONG_MAX) return of_fail(OF_ERR_ARG, "JPEG data too large");
    return jpeg_decode(data, n, out);
#else
    return of_fail(OF_ERR_STATE, "JPEG image, but liboneflow was built without libjpeg "
                   "(install libjpeg-dev and rebuild)");
#endif
  }
  if (n == 0) return of_fail(OF_ERR_IO, "empty data, not an image");
  return of_fail(OF_ERR_IO, "not a PNG or JPEG image (unknown signature %02x %02x %02x %02x)",
                 data[0], n > 1 ? data[1] : 0, n > 2 ? data[2] : 0, n > 3 ? data[3] : 0);
}

/* Re-raises the current error with a prefix. */
static of_status prefixed(of_status st, const char *op, const char *path) {
  char msg[768];
  snprintf(msg, sizeof msg, "%s", of_last_error());
  if (path) return of_fail(st, "%s: %s: %s", op, path, msg);
  return of_fail(st, "%s: %s", op, msg);
}

of_status of_image_decode(const uint8_t *data, int64_t n, of_tensor **out) {
  if (!out) return of_fail(OF_ERR_ARG, "image_decode: out is NULL");
  *out = NULL;
  if (!data && n > 0) return of_fail(OF_ERR_ARG, "image_decode: data is NULL");
  if (n < 0) return of_fail(OF_ERR_ARG, "image_decode: negative length %lld", (long long)n);
  of_status st = decode_any(data, n, out);
  return st == OF_OK ? st : prefixed(st, "image_decode", NULL);
}

of_status of_image_read(const char *path, of_tensor **out) {
  if (!out || !path) return of_fail(OF_ERR_ARG, "image_read: path or out is NULL");
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return of_fail(OF_ERR_IO, "image_read: cannot open %s (%s)", path, strerror(errno));
  long size = -1;
  if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
  if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return of_fail(OF_ERR_IO, "image_read: %s: cannot determine the file size", path);
  }
  int64_t max_file = LIM(lim_file);
  if ((int64_t)size > max_file) {
    fclose(f);
    return of_fail(OF_ERR_ARG, "image_read: %s: file of %ld bytes is larger than the %lld-byte limit "
                   "(of_image_set_limits, vision.io.set_image_limits: max_file_bytes)",
                   path, size, (long long)max_file);
  }
  uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
  if (!buf) {
    fclose(f);
    return of_fail(OF_ERR_OOM, "image_read: %s: out of memory for %ld bytes", path, size);
  }
  size_t got = fread(buf, 1, (size_t)size, f);
  fclose(f);
  if (got != (size_t)size) {
    free(buf);
    return of_fail(OF_ERR_IO, "image_read: %s: short read (%zu of %ld bytes)", path, got, size);
  }
  of_status st = decode_any(buf, (int64_t)size, out);
  free(buf);
  return st == OF_OK ? st : prefixed(st, "image_read", path);
}

/* img uint8 [H, W, C] or [H, W] on the CPU -> contiguous copy or alias. */
static of_status encode_input(of_tensor *img, of_tensor **c, int64_t *h, int64_t *w, int64_t *ch) {
  if (!img) return of_fail(OF_ERR_ARG, "image is NULL");
  if (img->dtype != OF_UINT8)
    return of_fail(OF_ERR_DTYPE, "expected a uint8 image [H, W, C], got %s", OF_DT(img));
  if (img->ndim != 2 && img->ndim != 3)
    return of_fail(OF_ERR_SHAPE, "expected an image [H, W, C] or [H, W], got %s", OF_SHAPE_STR(img));
  *h = img->shape[0];
  *w = img->shape[1];
  *ch = img->ndim == 3 ? img->shape[2] : 1;
  OF_CHECK(check_dims("image", *w, *h, *ch));
  /* the codecs read host memory: a device image is copied over (dense) */
  if (img->storage->device != OF_CPU) {
    of_tensor *h = NULL;
    OF_CHECK(of_to_device(img, OF_CPU, 0, &h));
    of_status st = of_contiguous_data(h, c);
    of_tensor_release(h);
    return st;
  }
  return of_contiguous_data(img, c);
}

static of_status encode(of_tensor *img, of_image_format fmt, int32_t quality, of_tensor **out) {
  int64_t h = 0, w = 0, ch = 0;
  of_tensor *c = NULL;
  if (fmt != OF_IMAGE_PNG && fmt != OF_IMAGE_JPEG)
    return of_fail(OF_ERR_ARG, "unknown image format %d (OF_IMAGE_PNG or OF_IMAGE_JPEG)", (int)fmt);
  OF_CHECK(encode_input(img, &c, &h, &w, &ch));
  if (!of_image_supported(fmt)) {
    of_tensor_release(c);
    return of_fail(OF_ERR_STATE, "liboneflow was built without %s (install %s and rebuild)",
                   fmt == OF_IMAGE_PNG ? "libpng" : "libjpeg",
                   fmt == OF_IMAGE_PNG ? "libpng-dev" : "libjpeg-dev");
  }
  of_status st = OF_ERR_STATE;
  const uint8_t *px = (const uint8_t *)of_ptr(c);
#ifdef OF_HAVE_PNG
  if (fmt == OF_IMAGE_PNG) st = png_encode(px, h, w, ch, out);
#endif
#ifdef OF_HAVE_JPEG
  if (fmt == OF_IMAGE_JPEG) st = jpeg_encode(px, h, w, ch, quality, out);
#endif
  (void)px;
  (void)quality;
  of_tensor_release(c);
  return st;
}

of_status of_image_encode(of_tensor *img, of_image_format fmt, int32_t quality, of_tensor **out) {
  if (!out) return of_fail(OF_ERR_ARG, "image_encode: out is NULL");
  *out = NULL;
  of_status st = encode(img, fmt, quality, out);
  return st == OF_OK ? st : prefixed(st, "image_encode", NULL);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  if (n < m) return 0;
  for (size_t i = 0; i < m; i++) {
    char a = s[n - m + i];
    if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
    if (a != suffix[i]) return 0;
  }
  return 1;
}

of_status of_image_write(const char *path, of_tensor *img, int32_t quality) {
  if (!path) return of_fail(OF_ERR_ARG, "image_write: path is NULL");
  of_image_format fmt;
  if (ends_with(path, ".png")) fmt = OF_IMAGE_PNG;
  else if (ends_with(path, ".jpg") || ends_with(path, ".jpeg")) fmt = OF_IMAGE_JPEG;
  else
    return of_fail(OF_ERR_ARG, "image_write: %s: unknown extension (use .png, .jpg or .jpeg)", path);
  of_tensor *bytes = NULL;
  of_status st = encode(img, fmt, quality, &bytes);
  if (st != OF_OK) return prefixed(st, "image_write", path);
  FILE *f = fopen(path, "wb");
  if (!f) {
    of_tensor_release(bytes);
    return of_fail(OF_ERR_IO, "image_write: cannot open %s for writing (%s)", path, strerror(errno));
  }
  size_t n = (size_t)bytes->numel;
  size_t put = fwrite(of_ptr(bytes), 1, n, f);
  int closed = fclose(f);
  of_tensor_release(bytes);
  if (put != n || closed != 0)
    return of_fail(OF_ERR_IO, "image_write: %s: write failed (%s)", path, strerror(errno));
  return OF_OK;
}
