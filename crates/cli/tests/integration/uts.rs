//! Integration tests: uts. A hostname set in a new uts namespace is seen there, and by every
//! process that joins it, and nowhere else.

use podlab_ns::child::run_in_child;
use podlab_ns::ops::{self, Holder};
use podlab_ns::{uts, NsKind};

#[test]
fn a_hostname_set_inside_is_read_back_inside_only() {
    let before = (uts::hostname().unwrap(), uts::domainname().unwrap());
    let (hostname, domainname, from_proc, inode): (String, String, String, u64) =
        run_in_child(|| {
            ops::create(&[NsKind::Uts])?;
            uts::set_hostname("podlab-it-uts")?;
            uts::set_domainname("podlab.it")?;
            let file = "/proc/sys/kernel/hostname";
            let from_proc = std::fs::read_to_string(file)
                .map_err(|e| podlab_ns::Error::io("reading", file, e))?;
            Ok((
                uts::hostname()?,
                uts::domainname()?,
                from_proc.trim_end().to_string(),
                ops::self_inode(NsKind::Uts)?,
            ))
        })
        .unwrap();
    assert_eq!(hostname, "podlab-it-uts");
    assert_eq!(from_proc, "podlab-it-uts", "the kernel's own file agrees");
    assert_eq!(domainname, "podlab.it");
    assert_ne!(inode, ops::self_inode(NsKind::Uts).unwrap());
    assert_eq!(
        (uts::hostname().unwrap(), uts::domainname().unwrap()),
        before,
        "the test process keeps its names"
    );
}

#[test]
fn a_process_that_joins_the_pod_uts_namespace_has_the_pods_hostname() {
    let before = uts::hostname().unwrap();
    let pod = Holder::spawn(&[NsKind::Uts], || uts::set_hostname("podlab-it-pod")).unwrap();
    let pod_uts = pod.ns_path(NsKind::Uts);
    let joined: String = run_in_child(|| {
        ops::join_path(&pod_uts, NsKind::Uts)?;
        uts::hostname()
    })
    .unwrap();
    assert_eq!(joined, "podlab-it-pod");
    assert_eq!(uts::hostname().unwrap(), before);
}
