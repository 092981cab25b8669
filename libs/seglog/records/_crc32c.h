/* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), as a v2 batch header stores it.
 *
 * The append path checks every batch's CRC inside the scan over the batch headers, so it
 * cannot call the crc32c library (a Python call and a memoryview per batch: ~0.4 us each,
 * 64 of them per 1 MiB of 16 KiB batches). On x86-64 with SSE4.2 the crc32 instruction is
 * used on three independent streams at once (its latency is 3 cycles, its throughput one
 * per cycle), the three CRCs combined with precomputed "shift by N zero bytes" tables, as
 * in the widely used public-domain crc32c.c: ~20 GB/s, the crc32c library's speed. Where AVX-512 with
 * VPCLMULQDQ runs, inputs of CRC32C_FOLD_MIN bytes or more are first folded with carry-less
 * multiplies (crc32c_fold below: 256 bytes a step, ~3x the crc32 instruction's 8 bytes a
 * cycle), which took the CRC check of a 1 MiB batch from ~39 us to ~13 us, a third of what
 * the append path spends besides the kernel's copy. Elsewhere, or without SSE4.2, a byte-wise
 * table (~0.5 GB/s). Tests compare each path with the crc32c library.
 */
#ifndef SEGLOG_CRC32C_H
#define SEGLOG_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CRC32C_POLY 0x82f63b78u
/* Stream lengths of the three-way loop: long blocks for large inputs, short ones after. */
#define CRC32C_LONG 8192
#define CRC32C_SHORT 256

static uint32_t crc32c_table[256];
static uint32_t crc32c_long[4][256];
static uint32_t crc32c_short[4][256];
static int crc32c_hw_ok = 0;

static uint32_t gf2_matrix_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_matrix_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_matrix_times(mat, mat[n]);
}

/* The operator that appends `len` zero bytes to a CRC (len a power of two here). */
static void crc32c_zeros_op(uint32_t *even, size_t len) {
    uint32_t odd[32];
    odd[0] = CRC32C_POLY;
    uint32_t row = 1;
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_matrix_square(even, odd); /* 2 zero bits */
    gf2_matrix_square(odd, even); /* 4 zero bits */
    do {
        gf2_matrix_square(even, odd);
        len >>= 1;
        if (len == 0) return;
        gf2_matrix_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof(odd));
}

static void crc32c_zeros(uint32_t zeros[][256], size_t len) {
    uint32_t op[32];
    crc32c_zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = gf2_matrix_times(op, n);
        zeros[1][n] = gf2_matrix_times(op, n << 8);
        zeros[2][n] = gf2_matrix_times(op, n << 16);
        zeros[3][n] = gf2_matrix_times(op, n << 24);
    }
}

static inline uint32_t crc32c_shift(uint32_t zeros[][256], uint32_t crc) {
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^
           zeros[3][crc >> 24];
}

static uint32_t crc32c_sw(const unsigned char *p, size_t len) {
    uint32_t crc = 0xffffffffu;
    while (len--) crc = crc32c_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc ^ 0xffffffffu;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SEGLOG_CRC32C_HW 1
#include <immintrin.h>

/* Folding (the carry-less multiply method of Intel's "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ", on 512-bit registers). A 16-byte block X of the input is
 * congruent, modulo P, to X * x^(8D) placed D bytes later, and that product is computed with
 * two 64x64-bit carry-less multiplies whose sum fits in 16 bytes:
 *   fold(X, D) = lo64(X) * K(8D + 63) ^ hi64(X) * K(8D - 1),  K(n) = bitreflect64(x^n mod P)
 * (bit-reflected operands, as the CRC is; the -1 accounts for the product of two reflected
 * 64-bit values landing one bit off the 128-bit reflected block). The whole input folds into
 * one 16-byte block congruent to it (the incoming CRC XORed into its first 4 bytes, as the
 * crc32 instruction takes it), whose CRC from state 0 is the input's: two crc32 instructions.
 * The constants (high half K(8D + 63), low half K(8D - 1)) were computed with Python's
 * integers from P = 0x11edc6f41 and are checked by tests/unit/test_single_pass_append.py
 * against the crc32c library on inputs of every size class. */
#define CRC32C_FOLD_MIN 1024 /* below this the three-way crc32 loop is as fast */
static int crc32c_fold_ok = 0;
#define CRC32C_K256_LO 0xe9a5d8be00000000ull
#define CRC32C_K256_HI 0x1426a81500000000ull
#define CRC32C_K64_LO 0x1c19243b00000000ull
#define CRC32C_K64_HI 0x75bba45b00000000ull
#define CRC32C_K16_LO 0x3743f7bd00000000ull
#define CRC32C_K16_HI 0x3171d43000000000ull
#define CRC32C_FOLD_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")))

CRC32C_FOLD_TARGET static inline __m512i crc32c_fold512(__m512i acc, __m512i k, __m512i data) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(acc, k, 0x00),
                                     _mm512_clmulepi64_epi128(acc, k, 0x11), data, 0x96);
}

CRC32C_FOLD_TARGET static inline __m128i crc32c_fold128(__m128i acc, __m128i k, __m128i data) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(acc, k, 0x00),
                                       _mm_clmulepi64_si128(acc, k, 0x11)),
                         data);
}

/* The CRC state (not inverted) after `crc` took `blocks` 64-byte blocks at `p` (4 or more). */
CRC32C_FOLD_TARGET static uint32_t crc32c_fold(uint32_t crc, const unsigned char *p,
                                               size_t blocks) {
    const __m512i k256 = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)CRC32C_K256_HI, (long long)CRC32C_K256_LO));
    const __m512i k64 = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)CRC32C_K64_HI, (long long)CRC32C_K64_LO));
    const __m128i k16 = _mm_set_epi64x((long long)CRC32C_K16_HI, (long long)CRC32C_K16_LO);
    __m512i a0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0,
                                                                          (long long)crc));
    __m512i a1 = _mm512_loadu_si512(p + 64);
    __m512i a2 = _mm512_loadu_si512(p + 128);
    __m512i a3 = _mm512_loadu_si512(p + 192);
    p += 256;
    blocks -= 4;
    for (; blocks >= 4; blocks -= 4, p += 256) {
        a0 = crc32c_fold512(a0, k256, _mm512_loadu_si512(p));
        a1 = crc32c_fold512(a1, k256, _mm512_loadu_si512(p + 64));
        a2 = crc32c_fold512(a2, k256, _mm512_loadu_si512(p + 128));
        a3 = crc32c_fold512(a3, k256, _mm512_loadu_si512(p + 192));
    }
    a1 = crc32c_fold512(a0, k64, a1);
    a2 = crc32c_fold512(a1, k64, a2);
    a3 = crc32c_fold512(a2, k64, a3);
    for (; blocks; blocks--, p += 64) a3 = crc32c_fold512(a3, k64, _mm512_loadu_si512(p));
    __m128i x = _mm512_extracti32x4_epi32(a3, 0);
    x = crc32c_fold128(x, k16, _mm512_extracti32x4_epi32(a3, 1));
    x = crc32c_fold128(x, k16, _mm512_extracti32x4_epi32(a3, 2));
    x = crc32c_fold128(x, k16, _mm512_extracti32x4_epi32(a3, 3));
    uint64_t state = __builtin_ia32_crc32di(0, (uint64_t)_mm_cvtsi128_si64(x));
    return (uint32_t)__builtin_ia32_crc32di(state, (uint64_t)_mm_extract_epi64(x, 1));
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(const unsigned char *next,
                                                             size_t len, int fold) {
    uint64_t crc0 = 0xffffffffu, crc1, crc2, word;
    while (len && ((uintptr_t)next & 7) != 0) {
        crc0 = __builtin_ia32_crc32qi((uint32_t)crc0, *next++);
        len--;
    }
    if (fold && crc32c_fold_ok && len >= CRC32C_FOLD_MIN) {
        size_t blocks = len / 64;
        crc0 = crc32c_fold((uint32_t)crc0, next, blocks);
        next += blocks * 64;
        len -= blocks * 64;
    }
    while (len >= 3 * CRC32C_LONG) {
        crc1 = crc2 = 0;
        const unsigned char *end = next + CRC32C_LONG;
        do {
            memcpy(&word, next, 8);
            crc0 = __builtin_ia32_crc32di(crc0, word);
            memcpy(&word, next + CRC32C_LONG, 8);
            crc1 = __builtin_ia32_crc32di(crc1, word);
            memcpy(&word, next + 2 * CRC32C_LONG, 8);
            crc2 = __builtin_ia32_crc32di(crc2, word);
            next += 8;
        } while (next < end);
        crc0 = crc32c_shift(crc32c_long, (uint32_t)crc0) ^ crc1;
        crc0 = crc32c_shift(crc32c_long, (uint32_t)crc0) ^ crc2;
        next += 2 * CRC32C_LONG;
        len -= 3 * CRC32C_LONG;
    }
    while (len >= 3 * CRC32C_SHORT) {
        crc1 = crc2 = 0;
        const unsigned char *end = next + CRC32C_SHORT;
        do {
            memcpy(&word, next, 8);
            crc0 = __builtin_ia32_crc32di(crc0, word);
            memcpy(&word, next + CRC32C_SHORT, 8);
            crc1 = __builtin_ia32_crc32di(crc1, word);
            memcpy(&word, next + 2 * CRC32C_SHORT, 8);
            crc2 = __builtin_ia32_crc32di(crc2, word);
            next += 8;
        } while (next < end);
        crc0 = crc32c_shift(crc32c_short, (uint32_t)crc0) ^ crc1;
        crc0 = crc32c_shift(crc32c_short, (uint32_t)crc0) ^ crc2;
        next += 2 * CRC32C_SHORT;
        len -= 3 * CRC32C_SHORT;
    }
    while (len >= 8) {
        memcpy(&word, next, 8);
        crc0 = __builtin_ia32_crc32di(crc0, word);
        next += 8;
        len -= 8;
    }
    while (len) {
        crc0 = __builtin_ia32_crc32qi((uint32_t)crc0, *next++);
        len--;
    }
    return (uint32_t)crc0 ^ 0xffffffffu;
}
#endif

static void crc32c_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = n;
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ CRC32C_POLY : crc >> 1;
        crc32c_table[n] = crc;
    }
    crc32c_zeros(crc32c_long, CRC32C_LONG);
    crc32c_zeros(crc32c_short, CRC32C_SHORT);
#ifdef SEGLOG_CRC32C_HW
    __builtin_cpu_init();
    crc32c_hw_ok = __builtin_cpu_supports("sse4.2");
    crc32c_fold_ok = crc32c_hw_ok && __builtin_cpu_supports("pclmul") &&
                     __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                     __builtin_cpu_supports("vpclmulqdq");
#endif
}

/* `force_software`: the portable path even where the instruction exists; `fold` 0: the
 * three-way crc32 loop alone even where folding runs (tests, for machines without it). */
static uint32_t crc32c_of(const unsigned char *p, size_t len, int force_software, int fold) {
#ifdef SEGLOG_CRC32C_HW
    if (crc32c_hw_ok && !force_software) return crc32c_hw(p, len, fold);
#else
    (void)force_software;
    (void)fold;
#endif
    return crc32c_sw(p, len);
}

#endif
