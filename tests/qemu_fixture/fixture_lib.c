/* A tiny shared library for tests/evidence/test_qemu_log.py: one exported function runs, one does not, and a
   hidden one runs NEON fmla/sdot and, when the CPU reports SME, an SME outer product (fmopa). */
#include <sys/auxv.h>

int sme2_fixture_ran(int x) {
  int s = 0;
  for (int i = 0; i < x; i++) s += i * x;
  return s;
}

int sme2_fixture_idle(int x) { return x * 3 + 1; }

/* Encoded by hand: binutils 2.40 does not assemble SME. fmla v0.4s, v0.4s, v1.4s; sdot v0.4s, v0.16b, v0.16b;
   smstart; zero {za}; ptrue p0.s; ptrue p1.s; fmopa za0.s, p0/m, p1/m, z0.s, z1.s; smstop. */
__attribute__((visibility("hidden"))) void fixture_hidden_kernel(void) {
  __asm__ volatile(".inst 0x4e21cc00\n .inst 0x4e809400\n" ::: "v0", "memory");
  if (getauxval(AT_HWCAP2) & (1UL << 23)) /* HWCAP2_SME */
    __asm__ volatile(".inst 0xd503477f\n .inst 0xc00800ff\n .inst 0x2598e3e0\n .inst 0x2598e3e1\n"
                     ".inst 0x80812000\n .inst 0xd503467f\n" ::: "memory");
}

int sme2_fixture_entry(int x) {
  fixture_hidden_kernel();
  return sme2_fixture_ran(x);
}
