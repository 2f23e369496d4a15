//! The few Linux system calls podlab-pause makes, issued directly (no C library is linked).
//!
//! Supported: x86_64 and aarch64. The signal trampoline (`restorer`) is what the kernel jumps to
//! when a handler returns; without a C library it has to be ours.

use core::arch::{asm, global_asm};

pub const SIGINT: i32 = 2;
pub const SIGTERM: i32 = 15;
pub const SIGCHLD: i32 = 17;
pub const SA_NOCLDSTOP: u64 = 1;
const SA_RESTORER: u64 = 0x0400_0000;
const WNOHANG: usize = 1;

#[cfg(target_arch = "x86_64")]
mod nr {
    pub const WRITE: usize = 1;
    pub const RT_SIGACTION: usize = 13;
    pub const PAUSE: usize = 34;
    pub const GETPID: usize = 39;
    pub const WAIT4: usize = 61;
    pub const EXIT_GROUP: usize = 231;
}

#[cfg(target_arch = "aarch64")]
mod nr {
    pub const WRITE: usize = 64;
    pub const RT_SIGACTION: usize = 134;
    pub const RT_SIGSUSPEND: usize = 133;
    pub const GETPID: usize = 172;
    pub const WAIT4: usize = 260;
    pub const EXIT_GROUP: usize = 94;
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("podlab-pause supports x86_64 and aarch64");

#[cfg(target_arch = "x86_64")]
global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call pause_main",
    "ud2",
    ".globl podlab_pause_restorer",
    "podlab_pause_restorer:",
    "mov eax, 15", // rt_sigreturn
    "syscall",
);

#[cfg(target_arch = "aarch64")]
global_asm!(
    ".globl _start",
    "_start:",
    "mov x29, #0",
    "mov x30, #0",
    "mov x0, sp",
    "bl pause_main",
    "brk #0",
    ".globl podlab_pause_restorer",
    "podlab_pause_restorer:",
    "mov x8, #139", // rt_sigreturn
    "svc #0",
);

extern "C" {
    fn podlab_pause_restorer();
}

#[cfg(target_arch = "x86_64")]
unsafe fn syscall4(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    asm!("syscall", inlateout("rax") n as isize => ret, in("rdi") a, in("rsi") b, in("rdx") c,
         in("r10") d, lateout("rcx") _, lateout("r11") _, options(nostack));
    ret
}

#[cfg(target_arch = "aarch64")]
unsafe fn syscall4(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    asm!("svc #0", in("x8") n, inlateout("x0") a as isize => ret, in("x1") b, in("x2") c,
         in("x3") d, options(nostack));
    ret
}

/// The kernel's `struct sigaction` (not glibc's): handler, flags, restorer, mask.
#[repr(C)]
struct KernelSigaction {
    handler: extern "C" fn(i32),
    flags: u64,
    restorer: unsafe extern "C" fn(),
    mask: u64,
}

pub fn write(fd: usize, bytes: &[u8]) {
    unsafe { syscall4(nr::WRITE, fd, bytes.as_ptr() as usize, bytes.len(), 0) };
}

pub fn exit(code: i32) -> ! {
    unsafe { syscall4(nr::EXIT_GROUP, code as usize, 0, 0, 0) };
    // exit_group does not return; the loop only satisfies `!`.
    loop {
        core::hint::spin_loop();
    }
}

pub fn getpid() -> isize {
    unsafe { syscall4(nr::GETPID, 0, 0, 0, 0) }
}

/// `waitpid(-1, NULL, WNOHANG)`: the pid reaped, 0 if children remain but none exited, <0 if none.
pub fn wait_any_nohang() -> isize {
    unsafe { syscall4(nr::WAIT4, usize::MAX, 0, WNOHANG, 0) }
}

/// Installs `handler` for `signal`; false when the kernel refused.
pub fn set_handler(signal: i32, handler: extern "C" fn(i32), flags: u64) -> bool {
    let action = KernelSigaction {
        handler,
        flags: flags | SA_RESTORER,
        restorer: podlab_pause_restorer,
        mask: 0,
    };
    let ret = unsafe {
        syscall4(
            nr::RT_SIGACTION,
            signal as usize,
            &action as *const _ as usize,
            0,
            8,
        )
    };
    ret == 0
}

/// Sleeps until a signal handler has run.
pub fn pause() {
    #[cfg(target_arch = "x86_64")]
    unsafe {
        syscall4(nr::PAUSE, 0, 0, 0, 0)
    };
    // aarch64 has no pause(2): rt_sigsuspend with an empty mask is its definition.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        let empty: u64 = 0;
        syscall4(nr::RT_SIGSUSPEND, &empty as *const u64 as usize, 8, 0, 0)
    };
}
