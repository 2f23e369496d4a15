//! Terminals: `exec -it` driven through a real pty, as a user's terminal drives it (the test
//! holds the master; podlab gets the slave as its controlling terminal), and `-i` without `-t`.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::termios::{self, LocalFlags};

use crate::pods::Root;
use crate::support::wait_until;

const LIMIT: Duration = Duration::from_secs(60);

/// A pty whose slave is a `podlab` command's controlling terminal and stdio.
pub struct Terminal {
    pub master: OwnedFd,
    pub slave: OwnedFd,
    /// Everything read so far; `seen` is how much of it an `expect` has consumed.
    transcript: Vec<u8>,
    seen: usize,
    marks: u32,
}

impl Terminal {
    pub fn new(rows: u16, cols: u16) -> Terminal {
        let size = nix::pty::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).unwrap();
        Terminal {
            master: pty.master,
            slave: pty.slave,
            transcript: Vec::new(),
            seen: 0,
            marks: 0,
        }
    }

    /// Starts `command` in a new session with the slave as its controlling terminal.
    pub fn spawn(&self, mut command: std::process::Command) -> Child {
        let slave = || Stdio::from(self.slave.try_clone().unwrap());
        command.stdin(slave()).stdout(slave()).stderr(slave());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        command.spawn().unwrap()
    }

    pub fn send(&self, bytes: &[u8]) {
        nix::unistd::write(&self.master, bytes).unwrap();
    }

    /// Reads until what came after the last match holds `needle`; returns that part.
    pub fn expect(&mut self, needle: &str) -> String {
        let start = Instant::now();
        loop {
            let fresh = &self.transcript[self.seen..];
            if let Some(at) = find(fresh, needle.as_bytes()) {
                let end = self.seen + at + needle.len();
                let part = String::from_utf8_lossy(&self.transcript[self.seen..end]).into_owned();
                self.seen = end;
                return part;
            }
            assert!(
                start.elapsed() < LIMIT,
                "{needle:?} did not come within {LIMIT:?}; the terminal shows: {:?}",
                String::from_utf8_lossy(&self.transcript[self.seen..])
            );
            let mut fds = [PollFd::new(self.master.as_fd(), PollFlags::POLLIN)];
            let _ = nix::poll::poll(&mut fds, PollTimeout::from(100u16));
            let mut buffer = [0u8; 4096];
            if fds[0].revents().is_some_and(|r| !r.is_empty()) {
                match nix::unistd::read(&self.master, &mut buffer) {
                    Ok(n) => self.transcript.extend_from_slice(&buffer[..n]),
                    Err(e) => panic!(
                        "the terminal closed ({e}) before {needle:?}; it showed: {:?}",
                        String::from_utf8_lossy(&self.transcript[self.seen..])
                    ),
                }
            }
        }
    }

    /// Types `line` into the shell and returns what it printed, up to an end mark that only the
    /// shell's output holds (its echo of the typed line shows the sum unevaluated).
    pub fn shell(&mut self, line: &str) -> String {
        self.marks += 1;
        let mark = self.marks * 1000;
        self.send(format!("{line}; echo end-$(({mark}+1))\r").as_bytes());
        self.expect(&format!("end-{}", mark + 1))
    }

    pub fn resize(&self, rows: u16, cols: u16) {
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one winsize.
        assert_eq!(
            unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size) },
            0
        );
    }

    pub fn settings(&self) -> termios::Termios {
        termios::tcgetattr(self.slave.as_fd()).unwrap()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Waits for `child` (bounded); its exit code.
pub fn wait_exit(child: &mut Child) -> i32 {
    let mut status = None;
    let exited = wait_until(LIMIT, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !exited {
        let _ = child.kill();
        panic!("podlab did not exit within {LIMIT:?}");
    }
    status.unwrap().code().expect("podlab exited by a signal")
}

/// Pids on this host of processes whose command line is `argv`.
fn processes_running(argv: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .collect()
}

fn settings_equal(a: &termios::Termios, b: &termios::Termios) -> bool {
    a.input_flags == b.input_flags
        && a.output_flags == b.output_flags
        && a.control_flags == b.control_flags
        && a.local_flags == b.local_flags
        && a.control_chars == b.control_chars
}

/// A pod running `sleep 999`, Ready.
pub fn running_pod(root: &Root, name: &str) {
    root.ok(&["run", name, "--image", "busybox", "--", "sleep", "999"]);
    root.ok(&[
        "wait",
        &format!("pod/{name}"),
        "--for=condition=Ready",
        "--timeout=60s",
    ]);
}

#[test]
fn exec_it_gives_a_shell_its_size_ctrl_c_and_exit_code_and_restores_the_terminal() {
    let root = Root::new("execit");
    running_pod(&root, "shell");
    let mut terminal = Terminal::new(30, 100);
    let before = terminal.settings();
    let mut podlab = terminal.spawn(root.command(&["exec", "-it", "shell", "--", "sh"]));

    terminal.expect("# ");
    let during = terminal.settings();
    assert!(
        !during.local_flags.contains(LocalFlags::ICANON)
            && !during.local_flags.contains(LocalFlags::ISIG),
        "the user's terminal is in raw mode during the session"
    );
    assert!(
        terminal.shell("stty size").contains("\n30 100"),
        "stty size inside is the terminal's"
    );

    terminal.resize(40, 120);
    // The resize travels (SIGWINCH to podlab, TIOCSWINSZ on the master): ask until it arrived.
    let mut resized = false;
    for _ in 0..100 {
        if terminal.shell("stty size").contains("\n40 120") {
            resized = true;
            break;
        }
    }
    assert!(resized, "stty size follows the resize");

    // /dev/pts in the container is its own devpts: its one pty is this session's.
    let listing = terminal.shell("ls /dev/pts; tty");
    assert!(listing.contains("\n/dev/pts/0"), "{listing}");

    terminal.send(b"sleep 1717\r");
    assert!(
        wait_until(LIMIT, || !processes_running(&["sleep", "1717"]).is_empty()),
        "the sleep started in the container"
    );
    terminal.send(b"\x03");
    assert!(
        wait_until(LIMIT, || processes_running(&["sleep", "1717"]).is_empty()),
        "Ctrl-C ended the container's foreground sleep"
    );
    terminal.shell("echo still here");
    assert!(
        podlab.try_wait().unwrap().is_none(),
        "Ctrl-C did not end podlab"
    );

    terminal.send(b"exit 3\r");
    assert_eq!(
        wait_exit(&mut podlab),
        3,
        "exit 3 in the container is podlab's status"
    );
    assert!(
        settings_equal(&before, &terminal.settings()),
        "the terminal's settings are back (stty -g before = after)"
    );
    // Nothing left: no exec'd process holds a pty in the container any more.
    let pts = root.ok(&["exec", "shell", "--", "ls", "/dev/pts"]);
    assert_eq!(pts.trim(), "ptmx", "no pty is left in the container");
}

#[test]
fn exec_i_pipes_stdin_and_t_without_a_terminal_warns_as_kubectl() {
    let root = Root::new("execi");
    running_pod(&root, "pipe");
    let piped = |args: &[&str]| {
        let mut child = root
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"hi\n").unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(
        piped(&["exec", "-i", "pipe", "--", "cat"]),
        (Some(0), "hi\n".into(), String::new())
    );
    assert_eq!(
        piped(&["exec", "pipe", "--", "cat"]),
        (Some(0), String::new(), String::new()),
        "without -i the container's stdin is empty"
    );
    assert_eq!(
        piped(&["exec", "-it", "pipe", "--", "cat"]),
        (
            Some(0),
            "hi\n".into(),
            "Unable to use a TTY - input is not a terminal or the right kind of file\n".into()
        )
    );
}

#[test]
fn run_it_attaches_to_the_containers_console_whose_output_lands_in_its_log() {
    let root = Root::new("runit");
    let mut terminal = Terminal::new(30, 100);
    let before = terminal.settings();
    let mut podlab = terminal.spawn(root.command(&[
        "run",
        "-it",
        "console",
        "--image",
        "busybox",
        "--restart",
        "Never",
        "--",
        "sh",
    ]));
    terminal.expect("If you don't see a command prompt, try pressing enter.");
    terminal.send(b"\r");
    terminal.expect("# ");
    assert!(
        terminal.shell("stty size").contains("\n30 100"),
        "attach gives the console the terminal's size"
    );
    terminal.shell("echo logged-$((40+2))");
    let pod = root.pod("console").expect("the pod");
    let spec = &pod.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        (spec.stdin, spec.stdin_once, spec.tty),
        (Some(true), Some(true), Some(true))
    );
    terminal.send(b"exit 3\r");
    assert_eq!(
        wait_exit(&mut podlab),
        3,
        "the container's exit code is podlab's"
    );
    assert!(
        settings_equal(&before, &terminal.settings()),
        "the terminal's settings are back"
    );
    let logs = root.ok(&["logs", "console"]);
    assert!(
        logs.contains("logged-42"),
        "the console's output is in the log: {logs:?}"
    );
}

#[test]
fn attach_refuses_an_unknown_container_in_kubectls_words() {
    let root = Root::new("attachbad");
    running_pod(&root, "quiet");
    let out = root.run(&["attach", "quiet", "-c", "nope"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("cannot attach to the container: container nope not found in pod quiet"),
        "{out:?}"
    );
}

const CONSOLE: &str = "
apiVersion: v1
kind: Pod
metadata:
  name: console
spec:
  restartPolicy: Never
  containers:
  - name: sh
    image: busybox
    command: [sh]
    stdin: true
    tty: true
  - name: cat
    image: busybox
    command: [cat]
    stdin: true
";

#[test]
fn attach_detaches_on_ctrl_p_ctrl_q_and_refuses_it_without_a_tty() {
    let root = Root::new("attachdetach");
    let out = root.apply(CONSOLE);
    assert_eq!(out.code, Some(0), "{out:?}");
    root.ok(&[
        "wait",
        "pod/console",
        "--for=condition=Ready",
        "--timeout=60s",
    ]);

    // A tty container: attach, a prompt after Enter, the size, then Ctrl-P Ctrl-Q.
    let mut terminal = Terminal::new(25, 90);
    let before = terminal.settings();
    let mut podlab = terminal.spawn(root.command(&["attach", "-it", "console", "-c", "sh"]));
    terminal.expect("If you don't see a command prompt, try pressing enter.");
    terminal.send(b"\r");
    terminal.expect("# ");
    assert!(terminal.shell("stty size").contains("\n25 90"));
    terminal.send(b"\x10\x11");
    assert_eq!(wait_exit(&mut podlab), 0, "a detach is no failure");
    terminal.expect("Detached from container sh: it keeps running.");
    assert!(settings_equal(&before, &terminal.settings()));
    let pod = root.pod("console").unwrap();
    assert!(crate::pods::running(&pod), "the container still runs");

    // Attached again: its shell goes on where it was, and its exit ends the session.
    let mut podlab = terminal.spawn(root.command(&["attach", "-it", "console", "-c", "sh"]));
    terminal.expect("try pressing enter.");
    terminal.send(b"\r");
    terminal.expect("# ");
    terminal.send(b"exit 3\r");
    assert_eq!(
        wait_exit(&mut podlab),
        0,
        "kubectl attach ends 0 when the process ends"
    );

    // A container with stdin and no tty: the keys are refused, the rest goes on; Ctrl-C
    // ends the attach and leaves the container running.
    let terminal = Terminal::new(25, 90);
    let mut settings = terminal.settings();
    // Without flow control off, the terminal itself would take Ctrl-Q.
    settings.input_flags.remove(termios::InputFlags::IXON);
    termios::tcsetattr(terminal.slave.as_fd(), termios::SetArg::TCSANOW, &settings).unwrap();
    let mut terminal = terminal;
    let mut podlab = terminal.spawn(root.command(&["attach", "-i", "console", "-c", "cat"]));
    terminal.expect("try pressing enter.");
    terminal.send(b"hello\r");
    terminal.expect("hello");
    terminal.send(b"\x10\x11\r");
    terminal.expect("error: cannot detach: container cat has no TTY");
    terminal.send(b"after\r");
    terminal.expect("after");
    assert!(
        podlab.try_wait().unwrap().is_none(),
        "the refusal ends nothing"
    );
    terminal.send(b"\x03");
    wait_exit(&mut podlab);
    let cat = crate::pods::container(&root.pod("console").unwrap(), "cat");
    assert!(
        cat.state.and_then(|s| s.running).is_some(),
        "Ctrl-C ended the attach, not the container"
    );
}

#[test]
fn debug_it_gives_an_ephemeral_container_a_terminal_and_returns_its_exit_code() {
    let root = Root::new("debugit");
    running_pod(&root, "target");
    let mut terminal = Terminal::new(30, 100);
    let before = terminal.settings();
    let mut podlab = terminal.spawn(root.command(&[
        "debug", "-it", "target", "--image", "busybox", "-c", "dbg", "--", "sh",
    ]));
    terminal.expect("try pressing enter.");
    terminal.send(b"\r");
    terminal.expect("# ");
    assert!(terminal.shell("stty size").contains("\n30 100"));
    terminal.send(b"exit 3\r");
    assert_eq!(wait_exit(&mut podlab), 3);
    assert!(settings_equal(&before, &terminal.settings()));
    let pod = root.pod("target").unwrap();
    let spec = &pod
        .spec
        .as_ref()
        .unwrap()
        .ephemeral_containers
        .as_ref()
        .unwrap()[0];
    assert_eq!((spec.stdin, spec.tty), (Some(true), Some(true)));
}

#[test]
fn run_rm_i_pipes_stdin_to_the_container_and_leaves_nothing() {
    let root = Root::new("runrmi");
    let out = crate::pods::Out::with_stdin(
        root.command(&[
            "run",
            "--rm",
            "-i",
            "-q",
            "catter",
            "--image",
            "busybox",
            "--restart",
            "Never",
            "--",
            "sh",
            "-c",
            "cat; exit 4",
        ]),
        "piped through\n",
    );
    assert_eq!(out.code, Some(4), "the container's exit code: {out:?}");
    assert_eq!(out.stdout, "piped through\n", "{out:?}");
    root.assert_nothing_left();
}
