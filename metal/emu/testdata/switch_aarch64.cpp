// switch_aarch64.cpp — a freestanding AArch64 program (run under qemu by
// TestAArch64Switch) that checks runtime/fiber_switch.h: two fibers ping-pong with
// the main context, with callee-saved registers (incl. d8-d15) live.
#include "fiber_switch.h"
static void* main_sp;
static void* fa_sp;
static void* fb_sp;
static long counter;
static double acc;
static char stack_a[65536] __attribute__((aligned(16)));
static char stack_b[65536] __attribute__((aligned(16)));
static void fiber_a(void* arg) {
    double x = 1.5;  // kept in a callee-saved FP register across switches
    for (long i = 0;; i++) {
        counter += (long)arg;
        x = x * 1.0000001 + 0.25;
        acc = x;
        forge_switch(&fa_sp, fb_sp);
    }
}
static void fiber_b(void* arg) {
    for (;;) {
        counter *= 3;
        forge_switch(&fb_sp, main_sp);
    }
}
static void sys_exit(int code) {
    register long x0 __asm__("x0") = code;
    register long x8 __asm__("x8") = 93;
    __asm__ volatile("svc 0" : : "r"(x0), "r"(x8));
}
extern "C" void _start() {
    fa_sp = init_frame(stack_a + sizeof stack_a, (void*)7, fiber_a);
    fb_sp = init_frame(stack_b + sizeof stack_b, 0, fiber_b);
    long expect = 0;
    double y = 1.5;
    for (int i = 0; i < 10; i++) {
        forge_switch(&main_sp, fa_sp);
        expect = (expect + 7) * 3;
        y = y * 1.0000001 + 0.25;
    }
    sys_exit(counter == expect && acc == y ? 42 : 1);
}
