//! `podlab port-forward`: an HTTP server in a pod with only `lo` reached from this namespace's
//! 127.0.0.1, with no address or route added; the listeners gone after Ctrl-C; a port in use
//! refused in kubectl's words.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

use crate::pods::Root;
use crate::support::wait_until;

const WEB: &str = "
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: httpd
    image: busybox
    command: [httpd, -f, -p, '8080', -h, /etc]
";

fn web(root: &Root) {
    let out = root.apply(WEB);
    assert_eq!(out.code, Some(0), "{out:?}");
    root.ok(&["wait", "pod/web", "--for=condition=Ready", "--timeout=60s"]);
}

#[test]
fn port_forward_reaches_an_http_server_in_the_pod_through_127_0_0_1() {
    let root = Root::new("portfwd");
    web(&root);
    let mut child = root
        .command(&["port-forward", "web", ":8080"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    let port: u16 = first
        .strip_prefix("Forwarding from 127.0.0.1:")
        .and_then(|rest| rest.strip_suffix(" -> 8080\n"))
        .unwrap_or_else(|| panic!("kubectl's line, not {first:?}"))
        .parse()
        .unwrap();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(b"GET /hostname HTTP/1.0\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(
        response.starts_with("HTTP/1.") && response.contains(" 200 "),
        "{response}"
    );
    assert!(
        response.ends_with("web\n"),
        "the pod's /etc/hostname: {response}"
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let mut status = None;
    assert!(wait_until(Duration::from_secs(30), || {
        status = child.try_wait().unwrap();
        status.is_some()
    }));
    assert_eq!(
        status.unwrap().code(),
        Some(0),
        "Ctrl-C ends port-forward quietly"
    );
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "no listener is left on {port}"
    );
}

#[test]
fn port_forward_refuses_a_port_in_use_and_a_pod_that_is_not_there() {
    let root = Root::new("portbusy");
    web(&root);
    // [::] takes the port for 127.0.0.1 and ::1 alike (without IPv6, 127.0.0.1 alone).
    let taken = std::net::TcpListener::bind("[::]:0")
        .or_else(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = root.run(&["port-forward", "web", &format!("{port}:8080")]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("address already in use"), "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "unable to listen on any of the requested ports: [{{{port} 8080}}]"
        )),
        "{out:?}"
    );
    let out = root.run(&["port-forward", "nosuch", "8080"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("\"nosuch\" not found"), "{out:?}");
}
