//! The allow-list as a binary search over call numbers, as libseccomp's optimised filters
//! are (`SCMP_FLTATR_CTL_OPTIMIZE` 2).
//!
//! seccompiler tests a filter's numbers one after another. The kernel runs a filter on every
//! call its per-call cache cannot answer, and fills that cache at the install by running the
//! filter for each call number of both x86 ABIs (`seccomp_cache_prepare`, about 900 runs): the
//! default profile's 360 numbers in a line took that fill about 155 instructions a number, 0.2
//! of the install's 0.3 ms in every container. A search reaches any number in about ten.
//!
//! The search's body comes after the program's prologue has the call's number in A: it returns
//! ALLOW for each number of the list and goes on past its end for any other, to the rest of the
//! program (the calls allowed on conditions, then the default answer). Classic BPF's
//! conditional jumps reach 255 instructions; a subtree farther than that is reached through
//! an unconditional jump, whose offset is 32 bits.

use seccompiler::sock_filter;

use super::bpf::{jump, stmt, JEQ_K, JGE_K, RET_K};

/// `BPF_JMP | BPF_JA`.
const JA: u16 = 0x05;
/// `BPF_JMP | BPF_JGT | BPF_K`.
const JGT_K: u16 = 0x05 | 0x20;

/// How many runs of numbers a leaf of the search tests one after another: as many as two more
/// levels of the search would narrow down, with fewer jumps out of the leaves.
const LEAF: usize = 4;

/// A run of consecutive numbers, first and last.
type Run = (u32, u32);

/// The body returning ALLOW for each of `numbers` (sorted, distinct) and falling through past
/// its last instruction for any other number in A. Consecutive numbers are tested as one range:
/// the default profile's 344 x86_64 numbers are 33 runs.
pub fn allow_any_of(numbers: &[u32]) -> Vec<sock_filter> {
    let mut runs: Vec<Run> = Vec::new();
    for &n in numbers {
        match runs.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(n) => *last = n,
            _ => runs.push((n, n)),
        }
    }
    let (mut body, to_end) = subtree(&runs);
    let end = body.len();
    for at in to_end {
        body[at].k = (end - at - 1) as u32;
    }
    body
}

/// The search over `runs`, and where its jumps past the end are (to be aimed once the whole
/// body's length is known).
fn subtree(runs: &[Run]) -> (Vec<sock_filter>, Vec<usize>) {
    if runs.is_empty() {
        return (Vec::new(), Vec::new());
    }
    if runs.len() <= LEAF {
        return leaf(runs);
    }
    let (lower, upper) = runs.split_at(runs.len() / 2);
    let (left, left_out) = subtree(lower);
    let (right, right_out) = subtree(upper);
    // A >= the upper half's first number: its subtree, after the lower half's.
    let mut body = Vec::with_capacity(left.len() + right.len() + 2);
    match u8::try_from(left.len()) {
        Ok(over) => body.push(jump(JGE_K, upper[0].0, over, 0)),
        Err(_) => {
            body.push(jump(JGE_K, upper[0].0, 0, 1));
            body.push(stmt(JA, left.len() as u32));
        }
    }
    let left_at = body.len();
    body.extend(left);
    let right_at = body.len();
    body.extend(right);
    let to_end = left_out
        .into_iter()
        .map(|at| at + left_at)
        .chain(right_out.into_iter().map(|at| at + right_at))
        .collect();
    (body, to_end)
}

/// Each run tested in turn, a hit jumping to the ALLOW after the leaf's jump out.
fn leaf(runs: &[Run]) -> (Vec<sock_filter>, Vec<usize>) {
    let mut body = Vec::with_capacity(2 * runs.len() + 2);
    for &(first, last) in runs {
        if first == last {
            body.push(jump(JEQ_K, first, 0, 0));
        } else {
            // Past the run: the next one; else from its first number on: ALLOW.
            body.push(jump(JGT_K, last, 1, 0));
            body.push(jump(JGE_K, first, 0, 0));
        }
    }
    let out = body.len();
    body.push(stmt(JA, 0));
    body.push(stmt(RET_K, libc::SECCOMP_RET_ALLOW));
    let allow = out + 1;
    for (at, insn) in body[..out].iter_mut().enumerate() {
        if insn.code != JGT_K {
            insn.jt = (allow - at - 1) as u8;
        }
    }
    (body, vec![out])
}

#[cfg(test)]
mod tests {
    use super::super::bpf::LD_W_ABS;
    use super::super::compact::tests::run;
    use super::*;

    const OTHER: u32 = libc::SECCOMP_RET_ERRNO | 1;

    /// The body behind a load of the number, then OTHER for what it lets through.
    fn program(numbers: &[u32]) -> Vec<sock_filter> {
        let mut program = vec![stmt(LD_W_ABS, 0)];
        program.extend(allow_any_of(numbers));
        program.push(stmt(RET_K, OTHER));
        program
    }

    fn answer(program: &[sock_filter], nr: u32) -> u32 {
        let mut data = [0u32; 16];
        data[0] = nr;
        run(program, &data)
    }

    #[test]
    fn every_listed_number_is_allowed_and_every_other_goes_on() {
        // Lists short and long enough for far jumps, runs and gaps, the ends of the range.
        let lists: Vec<Vec<u32>> = vec![
            vec![],
            vec![0],
            vec![7, 9],
            (0..8).collect(),
            (0..9).collect(),
            (0..600).filter(|n| n % 3 != 1).collect(),
            (0..2000).step_by(2).chain([u32::MAX]).collect(),
        ];
        for numbers in &lists {
            let program = program(numbers);
            let probes = (0..2100).chain([u32::MAX - 1, u32::MAX, 0x4000_0000]);
            for nr in probes {
                let expected = if numbers.binary_search(&nr).is_ok() {
                    libc::SECCOMP_RET_ALLOW
                } else {
                    OTHER
                };
                assert_eq!(answer(&program, nr), expected, "number {nr} of {numbers:?}");
            }
        }
    }

    #[test]
    fn a_number_is_found_in_a_few_comparisons() {
        let numbers: Vec<u32> = (0..460).filter(|n| n % 4 != 0).collect();
        let program = program(&numbers);
        // The longest path: one comparison per level and a leaf.
        let longest = (0..470u32)
            .map(|nr| {
                let (mut pc, mut steps) = (1usize, 0);
                while program[pc].code != RET_K {
                    steps += 1;
                    let insn = &program[pc];
                    pc = match insn.code {
                        JA => pc + 1 + insn.k as usize,
                        JEQ_K if nr == insn.k => pc + 1 + insn.jt as usize,
                        JGE_K if nr >= insn.k => pc + 1 + insn.jt as usize,
                        _ => pc + 1 + insn.jf as usize,
                    };
                }
                steps
            })
            .max()
            .unwrap();
        assert!(longest <= 20, "{longest} instructions on the longest path");
    }
}
