//! One filter doing the work of several: the programs of a profile chained, each one's ALLOW
//! going on to the next program instead of returning.
//!
//! The kernel runs every installed filter on each call its per-call cache cannot answer and
//! keeps the strictest answer, the newest filter's among equally strict ones
//! (`seccomp_run_filters`). A profile compiled into several filters (the allow-list and one
//! per rule action, for each ABI, and the ABI gate) is that many programs run on such a call
//! for the container's whole life, and that many times an install's fixed cost (the checks, the
//! JIT, the cache's fill), where runc installs one. Chained, the first program that does not
//! answer ALLOW answers for all, and that is the kernel's answer when the programs are ordered
//! strictest first: each program here answers ALLOW or one other value of its own, so ordering
//! them by that value's strictness, the newer first among equals, makes the first non-ALLOW
//! answer the one the kernel would keep.
//!
//! A set holding a program that answers two values other than ALLOW, or an instruction other
//! than those [`super::compile`] writes (loads of the call's data, AND, jumps on constants,
//! returns of constants), is left as separate filters; [`super::compile`] writes neither (the
//! kill of x32 calls in a profile without x32 is the ABI gate's, not each native program's).
//! Programs longer together than the kernel's BPF_MAXINSNS make several chains, installed
//! strictest last, so that a tie between two chains still goes to the newer program.

use seccompiler::{sock_filter, BpfProgram};

use super::bpf::{stmt, AND_K, LD_W_ABS, RET_K};

/// The longest program the kernel takes (linux/bpf_common.h).
const BPF_MAXINSNS: usize = 4096;
const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
/// `BPF_JMP | BPF_JA`.
const JA: u16 = 0x05;

/// How strict an answer is, as the kernel compares them (`ACTION_ONLY`): lower is stricter.
fn strictness(answer: u32) -> i32 {
    (answer & libc::SECCOMP_RET_ACTION_FULL) as i32
}

/// A jump on a constant (JA, JEQ, JGT, JGE, JSET with `BPF_K`).
fn is_constant_jump(code: u16) -> bool {
    code & 0x07 == 0x05 && code & 0x08 == 0 && code & 0xf0 <= 0x40
}

/// What `program` answers besides ALLOW: `Some(None)` when it only ever allows, `Some(Some(k))`
/// for its one other answer, `None` when it cannot be chained.
fn sole_answer(program: &[sock_filter]) -> Option<Option<u32>> {
    // Each program must load before it compares: in a chain it does not start with A = 0.
    if program.first()?.code != LD_W_ABS {
        return None;
    }
    let mut answer = None;
    for insn in program {
        match insn.code {
            LD_W_ABS | AND_K => {}
            RET_K if insn.k == ALLOW => {}
            RET_K => match answer {
                None => answer = Some(insn.k),
                Some(k) if k == insn.k => {}
                Some(_) => return None,
            },
            code if is_constant_jump(code) => {}
            _ => return None,
        }
    }
    Some(answer)
}

/// `filters` (in the order they would be installed) as few filters giving every call the same
/// answer; `filters` themselves when they cannot be chained.
pub fn chain(filters: Vec<BpfProgram>) -> Vec<BpfProgram> {
    let mut order = Vec::with_capacity(filters.len());
    for (installed, program) in filters.iter().enumerate() {
        match sole_answer(program) {
            None => return filters,
            // A program that allows everything changes no answer.
            Some(None) => {}
            Some(Some(answer)) => order.push((strictness(answer), installed)),
        }
    }
    order.sort_by_key(|&(strictness, installed)| (strictness, std::cmp::Reverse(installed)));
    let mut chains = Vec::new();
    let mut links: Vec<&BpfProgram> = Vec::new();
    for (_, installed) in order {
        let program = &filters[installed];
        let length: usize = links.iter().map(|p| p.len()).sum();
        if !links.is_empty() && length + program.len() > BPF_MAXINSNS {
            chains.push(joined(&links));
            links.clear();
        }
        links.push(program);
    }
    if !links.is_empty() {
        chains.push(joined(&links));
    }
    // Installed last, the strictest chain wins a tie with a later one, as its newer programs did.
    chains.reverse();
    chains
}

/// `programs` one after another, each ALLOW but the last program's jumping to the next start.
fn joined(programs: &[&BpfProgram]) -> BpfProgram {
    let mut out = Vec::with_capacity(programs.iter().map(|p| p.len()).sum());
    for (at, program) in programs.iter().enumerate() {
        let last = at + 1 == programs.len();
        for (pc, insn) in program.iter().enumerate() {
            if !last && insn.code == RET_K && insn.k == ALLOW {
                out.push(stmt(JA, (program.len() - pc - 1) as u32));
            } else {
                out.push(insn.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::bpf::{jump, JEQ_K, NR_OFFSET};
    use super::*;

    /// A program answering `answer` for call `nr` and ALLOW for the others.
    fn answering(nr: u32, answer: u32) -> BpfProgram {
        vec![
            stmt(LD_W_ABS, NR_OFFSET),
            jump(JEQ_K, nr, 0, 1),
            stmt(RET_K, answer),
            stmt(RET_K, ALLOW),
        ]
    }

    /// The kernel's answer to call `nr` ([`super::super::tests::answer`]).
    fn run_all(filters: &[BpfProgram], nr: u32) -> u32 {
        let mut data = [0u32; 16];
        data[0] = nr;
        super::super::tests::answer(filters, &data)
    }

    #[test]
    fn the_strictest_answer_wins_and_the_newest_among_equals() {
        let errno = |e: u32| libc::SECCOMP_RET_ERRNO | e;
        let filters = vec![
            answering(1, errno(13)),
            answering(1, libc::SECCOMP_RET_KILL_PROCESS),
            answering(2, errno(13)),
            answering(2, errno(1)),
            answering(3, libc::SECCOMP_RET_LOG),
            answering(3, libc::SECCOMP_RET_TRAP),
            answering(4, ALLOW),
        ];
        let chained = chain(filters.clone());
        assert_eq!(chained.len(), 1);
        for nr in 0..6 {
            assert_eq!(run_all(&chained, nr), run_all(&filters, nr), "call {nr}");
        }
        assert_eq!(run_all(&chained, 2), errno(1), "the newer of two errnos");
    }

    #[test]
    fn programs_longer_than_the_kernel_takes_make_chains_that_still_answer_alike() {
        let errno = |e: u32| libc::SECCOMP_RET_ERRNO | e;
        let mut long = answering(7, errno(5));
        long.splice(1..1, std::iter::repeat_n(stmt(AND_K, u32::MAX), 3000));
        let filters = vec![
            answering(7, errno(13)),
            long.clone(),
            long,
            answering(7, libc::SECCOMP_RET_KILL_PROCESS),
            answering(8, errno(13)),
        ];
        let chained = chain(filters.clone());
        assert_eq!(chained.len(), 2);
        assert!(chained.iter().all(|c| c.len() <= BPF_MAXINSNS));
        for nr in 0..10 {
            assert_eq!(run_all(&chained, nr), run_all(&filters, nr), "call {nr}");
        }
    }

    #[test]
    fn a_program_with_two_answers_leaves_the_filters_apart() {
        let mut two = answering(1, libc::SECCOMP_RET_KILL_PROCESS);
        two.splice(
            3..3,
            [jump(JEQ_K, 2, 0, 1), stmt(RET_K, libc::SECCOMP_RET_ERRNO)],
        );
        let filters = vec![two, answering(3, libc::SECCOMP_RET_TRAP)];
        assert_eq!(chain(filters.clone()), filters);
    }
}
