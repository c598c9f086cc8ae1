// fiber_switch.h — the fibers' context switch (x86-64 SysV and AArch64,
// ELF and Mach-O), included by runtime.cpp. No system headers: it can be
// compiled on its own for another target to check it assembles.
#pragma once

typedef __UINTPTR_TYPE__ forge_uptr;

// ---- context switch -------------------------------------------------------------
// forge_switch saves the callee-saved registers and the stack pointer into
// *save and resumes the context whose stack pointer is `to`.
extern "C" void forge_switch(void** save, void* to);
extern "C" void forge_fiber_tramp();

#if defined(__x86_64__)
__asm__(
    ".text\n"
    ".p2align 4\n"
#if defined(__APPLE__)
    ".globl _forge_switch\n.private_extern _forge_switch\n"
    "_forge_switch:\n"
#else
    ".globl forge_switch\n.hidden forge_switch\n"
    ".type forge_switch,@function\n"
    "forge_switch:\n"
#endif
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".p2align 4\n"
#if defined(__APPLE__)
    ".globl _forge_fiber_tramp\n.private_extern _forge_fiber_tramp\n"
    "_forge_fiber_tramp:\n"
#else
    ".globl forge_fiber_tramp\n.hidden forge_fiber_tramp\n"
    ".type forge_fiber_tramp,@function\n"
    "forge_fiber_tramp:\n"
#endif
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n");
enum { FRAME_WORDS = 7 };
static void* init_frame(char* top, void* arg, void (*fn)(void*)) {
    // pops r15 r14 r13 r12 rbx rbp, then ret → tramp with rsp ≡ 0 (mod 16).
    forge_uptr* sp = (forge_uptr*)(((forge_uptr)top & ~(forge_uptr)15) - 72);
    sp[0] = 0; sp[1] = 0; sp[2] = (forge_uptr)fn; sp[3] = (forge_uptr)arg; sp[4] = 0; sp[5] = 0;
    sp[6] = (forge_uptr)forge_fiber_tramp;
    sp[7] = 0;
    return sp;
}
#elif defined(__aarch64__)
__asm__(
    ".text\n"
    ".p2align 4\n"
#if defined(__APPLE__)
    ".globl _forge_switch\n.private_extern _forge_switch\n"
    "_forge_switch:\n"
#else
    ".globl forge_switch\n.hidden forge_switch\n"
    ".type forge_switch,%function\n"
    "forge_switch:\n"
#endif
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n  stp d14, d15, [sp, #144]\n"
    "  mov x9, sp\n  str x9, [x0]\n  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n"
    "  ret\n"
    ".p2align 4\n"
#if defined(__APPLE__)
    ".globl _forge_fiber_tramp\n.private_extern _forge_fiber_tramp\n"
    "_forge_fiber_tramp:\n"
#else
    ".globl forge_fiber_tramp\n.hidden forge_fiber_tramp\n"
    ".type forge_fiber_tramp,%function\n"
    "forge_fiber_tramp:\n"
#endif
    "  mov x0, x19\n"
    "  blr x20\n"
    "  brk #1\n");
static void* init_frame(char* top, void* arg, void (*fn)(void*)) {
    forge_uptr* sp = (forge_uptr*)(((forge_uptr)top & ~(forge_uptr)15) - 160);
    for (int i = 0; i < 20; i++) sp[i] = 0;
    sp[0] = (forge_uptr)arg;                 // x19
    sp[1] = (forge_uptr)fn;                  // x20
    sp[11] = (forge_uptr)forge_fiber_tramp;  // x30
    return sp;
}
#else
#error "metal-emu: no context switch for this architecture"
#endif

