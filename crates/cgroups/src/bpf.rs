//! The cgroup v2 device controller: a `BPF_PROG_TYPE_CGROUP_DEVICE` program, made from device
//! rules, loaded with `bpf(BPF_PROG_LOAD)` and attached to a cgroup's folder with
//! `bpf(BPF_PROG_ATTACH, BPF_CGROUP_DEVICE)`, as runc and youki do on v2.
//!
//! cgroup v2 has no `devices.allow`: on every `mknod` and every `open` of a device node by a
//! process of the cgroup (or of a cgroup below it) the kernel runs the programs attached to it
//! and to its ancestors, with a `struct bpf_cgroup_dev_ctx` (linux/bpf.h):
//!
//! ```text
//! u32 access_type   (BPF_DEVCG_ACC_{MKNOD=1,READ=2,WRITE=4} << 16) | BPF_DEVCG_DEV_{BLOCK=1,CHAR=2}
//! u32 major
//! u32 minor
//! ```
//!
//! and the program returns 1 to allow, 0 to deny (`EPERM`). The program built here denies by
//! default and allows what one of its rules matches: per rule a block that jumps to the next
//! rule when the type, the access (the request's bits must all be in the rule's), the major or
//! the minor differ, and returns 1 otherwise. An allow-all rule (`a`, privileged) is a program
//! that returns 1.
//!
//! No crate is used: the program needs six kinds of instruction, and the two system calls take a
//! plain `union bpf_attr`. The program uses no helper function, so its license string does not
//! matter to the kernel; it is podlab's own. The program's descriptor is closed once attached:
//! the attachment holds the program, and the kernel frees both with the cgroup.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::devices::Rule;
use crate::{Error, Result};

/// `BPF_PROG_LOAD`, `BPF_PROG_ATTACH` (linux/bpf.h `enum bpf_cmd`).
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_PROG_ATTACH: libc::c_int = 8;
/// `BPF_PROG_TYPE_CGROUP_DEVICE` (`enum bpf_prog_type`).
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
/// `BPF_CGROUP_DEVICE` (`enum bpf_attach_type`).
const BPF_CGROUP_DEVICE: u32 = 6;
/// `BPF_F_ALLOW_MULTI`: other programs (an ancestor's, another runtime's) may stay attached too;
/// the kernel allows an access only if every one of them does.
const BPF_F_ALLOW_MULTI: u32 = 1 << 1;

const ACC_MKNOD: i32 = 1;
const ACC_READ: i32 = 2;
const ACC_WRITE: i32 = 4;
const DEV_BLOCK: i32 = 1;
const DEV_CHAR: i32 = 2;

/// One eBPF instruction (`struct bpf_insn`): opcode, `dst | src << 4`, offset, immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

/// The registers the program uses: r0 the verdict, r1 the context on entry.
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R5: u8 = 5;

/// The few instructions the program needs (linux/bpf_common.h, linux/bpf.h opcodes).
impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: dst | (src << 4),
            off,
            imm,
        }
    }
    /// `dst = *(u32 *)(src + off)`: BPF_LDX | BPF_MEM | BPF_W.
    const fn load_u32(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x61, dst, src, off, 0)
    }
    /// `dst = imm`: BPF_ALU64 | BPF_MOV | BPF_K.
    const fn mov_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(0xb7, dst, 0, 0, imm)
    }
    /// `dst = src`: BPF_ALU64 | BPF_MOV | BPF_X.
    const fn mov_reg(dst: u8, src: u8) -> Insn {
        Insn::new(0xbf, dst, src, 0, 0)
    }
    /// `dst &= imm`: BPF_ALU64 | BPF_AND | BPF_K.
    const fn and_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(0x57, dst, 0, 0, imm)
    }
    /// `dst >>= imm`: BPF_ALU64 | BPF_RSH | BPF_K.
    const fn rsh_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(0x77, dst, 0, 0, imm)
    }
    /// `if dst != imm goto +off`: BPF_JMP | BPF_JNE | BPF_K.
    const fn jne_imm(dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(0x55, dst, 0, off, imm)
    }
    /// `if dst != src goto +off`: BPF_JMP | BPF_JNE | BPF_X.
    const fn jne_reg(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x5d, dst, src, off, 0)
    }
    /// `return r0`: BPF_JMP | BPF_EXIT.
    const fn exit() -> Insn {
        Insn::new(0x95, 0, 0, 0, 0)
    }
}

/// The access bits of a rule's `rwm` string.
fn access_bits(access: &str) -> i32 {
    access.chars().fold(0, |bits, c| {
        bits | match c {
            'r' => ACC_READ,
            'w' => ACC_WRITE,
            'm' => ACC_MKNOD,
            _ => 0,
        }
    })
}

/// The program that allows what one of `rules` allows and denies everything else. A rule of
/// kind `a` with access `rwm` allows everything (runc's privileged `a *:* rwm`).
pub fn program(rules: &[Rule]) -> Vec<Insn> {
    if rules
        .iter()
        .any(|r| r.kind == 'a' && access_bits(r.access) == ACC_MKNOD | ACC_READ | ACC_WRITE)
    {
        return vec![Insn::mov_imm(R0, 1), Insn::exit()];
    }
    let mut insns = vec![
        // r2 = device type, r3 = access, r4 = major, r5 = minor.
        Insn::load_u32(R2, R1, 0),
        Insn::and_imm(R2, 0xffff),
        Insn::load_u32(R3, R1, 0),
        Insn::rsh_imm(R3, 16),
        Insn::load_u32(R4, R1, 4),
        Insn::load_u32(R5, R1, 8),
    ];
    for rule in rules {
        let allowed = access_bits(rule.access);
        if allowed == 0 {
            continue;
        }
        // Each check is a jump over the rest of this block to the next rule; the offsets are
        // filled in once the block's length is known.
        let mut block: Vec<Insn> = Vec::new();
        match rule.kind {
            'c' => block.push(Insn::jne_imm(R2, DEV_CHAR, 0)),
            'b' => block.push(Insn::jne_imm(R2, DEV_BLOCK, 0)),
            _ => {}
        }
        if allowed != ACC_MKNOD | ACC_READ | ACC_WRITE {
            // Every bit asked for must be one the rule gives: (access & allowed) == access.
            block.push(Insn::mov_reg(R1, R3));
            block.push(Insn::and_imm(R1, allowed));
            block.push(Insn::jne_reg(R1, R3, 0));
        }
        if let Some(major) = rule.major {
            block.push(Insn::jne_imm(R4, major as i32, 0));
        }
        if let Some(minor) = rule.minor {
            block.push(Insn::jne_imm(R5, minor as i32, 0));
        }
        block.push(Insn::mov_imm(R0, 1));
        block.push(Insn::exit());
        let len = block.len();
        for (i, insn) in block.iter_mut().enumerate() {
            if matches!(insn.code, 0x55 | 0x5d) {
                // A jump's offset counts from the instruction after it.
                insn.off = (len - i - 1) as i16;
            }
        }
        insns.extend(block);
    }
    insns.push(Insn::mov_imm(R0, 0));
    insns.push(Insn::exit());
    insns
}

/// `union bpf_attr` for BPF_PROG_LOAD, up to the fields podlab sets; the kernel reads the rest
/// as zero.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
}

/// `union bpf_attr` for BPF_PROG_ATTACH.
#[repr(C)]
#[derive(Default)]
struct ProgAttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> std::result::Result<libc::c_long, nix::Error> {
    // SAFETY: `attr` is a live, initialised bpf_attr of the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if ret < 0 {
        Err(nix::Error::last())
    } else {
        Ok(ret)
    }
}

/// Loads `insns` as a device program. `for_path` names the cgroup in an error; a refusal by the
/// verifier carries its log.
pub fn load(insns: &[Insn], for_path: &Path) -> Result<OwnedFd> {
    let license = CString::new("Apache-2.0").expect("no NUL");
    let mut name = [0u8; 16];
    name[..13].copy_from_slice(b"podlab_device");
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name,
        ..ProgLoadAttr::default()
    };
    let fd = match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => fd,
        Err(errno) => {
            // Again with the verifier's log, to say why.
            let mut log = vec![0u8; 64 * 1024];
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            let _ = bpf(BPF_PROG_LOAD, &mut attr);
            let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]).trim().to_string();
            return Err(Error::Bpf {
                call: "bpf(BPF_PROG_LOAD, BPF_PROG_TYPE_CGROUP_DEVICE)",
                path: for_path.to_path_buf(),
                errno,
                log: text,
            });
        }
    };
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Attaches the device program `prog` to the cgroup folder `dir` (a cgroup2 folder).
pub fn attach(prog: &OwnedFd, dir: &Path) -> Result<()> {
    let folder = std::fs::File::open(dir).map_err(|e| Error::io("opening", dir, e))?;
    let mut attr = ProgAttachAttr {
        target_fd: folder.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        ..ProgAttachAttr::default()
    };
    bpf(BPF_PROG_ATTACH, &mut attr)
        .map(drop)
        .map_err(|errno| Error::Bpf {
            call: "bpf(BPF_PROG_ATTACH, BPF_CGROUP_DEVICE)",
            path: dir.to_path_buf(),
            errno,
            log: String::new(),
        })
}

/// Builds the program of `rules`, loads it and attaches it to the cgroup2 folder `dir`.
pub fn attach_rules(rules: &[Rule], dir: &Path) -> Result<()> {
    let prog = load(&program(rules), dir)?;
    attach(&prog, dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::DEFAULT_ALLOWED;

    /// Runs the program as the kernel would, on one access: a tiny interpreter of the
    /// instructions [`program`] emits.
    fn run(insns: &[Insn], kind: i32, access: i32, major: u32, minor: u32) -> u64 {
        let ctx = [((access << 16) | kind) as u32, major, minor];
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        loop {
            let insn = insns[pc];
            let (dst, src) = ((insn.regs & 0xf) as usize, (insn.regs >> 4) as usize);
            pc += 1;
            match insn.code {
                0x61 => {
                    assert_eq!(src, 1, "loads come from the context");
                    r[dst] = u64::from(ctx[insn.off as usize / 4]);
                }
                0xb7 => r[dst] = insn.imm as i64 as u64,
                0xbf => r[dst] = r[src],
                0x57 => r[dst] &= insn.imm as i64 as u64,
                0x77 => r[dst] >>= insn.imm,
                0x55 if r[dst] != insn.imm as i64 as u64 => pc += insn.off as usize,
                0x5d if r[dst] != r[src] => pc += insn.off as usize,
                0x55 | 0x5d => {}
                0x95 => return r[0],
                other => panic!("opcode {other:#x}"),
            }
        }
    }

    #[test]
    fn the_default_program_allows_runcs_devices_and_nothing_else() {
        let p = program(&DEFAULT_ALLOWED);
        let (c, b) = (DEV_CHAR, DEV_BLOCK);
        let rw = ACC_READ | ACC_WRITE;
        // /dev/null, /dev/zero, /dev/urandom, /dev/tty, /dev/ptmx, /dev/pts/3.
        for (major, minor) in [
            (1, 3),
            (1, 5),
            (1, 9),
            (1, 8),
            (1, 7),
            (5, 0),
            (5, 2),
            (136, 3),
        ] {
            assert_eq!(run(&p, c, rw, major, minor), 1, "c {major}:{minor} rw");
        }
        // mknod of any node; opening /dev/kmsg, /dev/mem, a disk: no.
        assert_eq!(run(&p, c, ACC_MKNOD, 1, 11), 1);
        assert_eq!(run(&p, b, ACC_MKNOD, 8, 0), 1);
        assert_eq!(run(&p, c, ACC_READ, 1, 11), 0, "/dev/kmsg");
        assert_eq!(run(&p, c, ACC_WRITE, 1, 1), 0, "/dev/mem");
        assert_eq!(run(&p, b, ACC_READ, 8, 0), 0, "/dev/sda");
        assert_eq!(
            run(&p, b, rw, 1, 3),
            0,
            "a block device 1:3 is not /dev/null"
        );
        assert_eq!(
            run(&p, c, rw | ACC_MKNOD, 1, 11),
            0,
            "every bit must be allowed"
        );
    }

    #[test]
    fn no_rules_deny_everything_and_a_privileged_rule_allows_everything() {
        let deny = program(&[]);
        assert_eq!(run(&deny, DEV_CHAR, ACC_READ, 1, 3), 0);
        assert_eq!(run(&deny, DEV_CHAR, ACC_MKNOD, 1, 3), 0);
        let all = program(&[crate::devices::ALLOW_ALL]);
        assert_eq!(all.len(), 2);
        assert_eq!(run(&all, DEV_BLOCK, ACC_READ | ACC_WRITE, 8, 0), 1);
        let only_mknod = program(&[Rule {
            kind: 'a',
            major: None,
            minor: None,
            access: "m",
        }]);
        assert_eq!(run(&only_mknod, DEV_BLOCK, ACC_MKNOD, 8, 0), 1);
        assert_eq!(run(&only_mknod, DEV_BLOCK, ACC_READ, 8, 0), 0);
    }

    #[test]
    fn instructions_are_encoded_as_struct_bpf_insn() {
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        let insn = Insn::load_u32(R4, R1, 4);
        // SAFETY: Insn is 8 plain bytes.
        let bytes: [u8; 8] = unsafe { std::mem::transmute(insn) };
        assert_eq!(bytes, [0x61, 0x14, 4, 0, 0, 0, 0, 0]);
    }
}
