//! Integration tests: ipc. System V objects and POSIX message queues made in a new ipc
//! namespace are seen by the processes in it and by no one else.

use podlab_ns::child::run_in_child;
use podlab_ns::ipc::{self, SysvKind, SysvObject};
use podlab_ns::ops::{self, Holder};
use podlab_ns::NsKind;

/// A SysV key of this test run's own (the demo uses another), so that parallel tests never meet.
fn key(salt: i32) -> i32 {
    0x7000_0000 | ((std::process::id() as i32 & 0xffff) << 8) | salt
}

fn has_key(objects: &[SysvObject], kind: SysvKind, key: i32) -> bool {
    objects.iter().any(|o| o.kind == kind && o.key == key)
}

#[test]
fn sysv_objects_made_inside_are_absent_outside() {
    let key = key(1);
    let pod = Holder::spawn(&[NsKind::Ipc], || Ok(())).unwrap();
    let pod_ipc = pod.ns_path(NsKind::Ipc);
    let inside: Vec<SysvObject> = run_in_child(|| {
        ops::join_path(&pod_ipc, NsKind::Ipc)?;
        ipc::create_sysv_queue_keyed(key)?;
        ipc::create_sysv_semaphores_keyed(key, 2)?;
        ipc::create_sysv_shm_keyed(key, 4096)?;
        ipc::list_sysv()
    })
    .unwrap();
    let outside = ipc::list_sysv().unwrap();
    for kind in SysvKind::ALL {
        assert!(has_key(&inside, kind, key), "{kind:?} inside: {inside:?}");
        assert!(
            !has_key(&outside, kind, key),
            "{kind:?} leaked: {outside:?}"
        );
    }

    // Another process joining the namespace later still finds them, and can remove them.
    let after: Vec<SysvObject> = run_in_child(|| {
        ops::join_path(&pod_ipc, NsKind::Ipc)?;
        for object in ipc::list_sysv()? {
            match object.kind {
                SysvKind::Queue => ipc::remove_sysv_queue(object.id)?,
                SysvKind::Semaphores => ipc::remove_sysv_semaphores(object.id)?,
                SysvKind::SharedMemory => ipc::remove_sysv_shm(object.id)?,
            }
        }
        ipc::list_sysv()
    })
    .unwrap();
    assert!(after.is_empty(), "left behind: {after:?}");
}

#[test]
fn the_same_key_names_different_objects_in_two_namespaces() {
    let key = key(2);
    let outside = ipc::create_sysv_queue_keyed(key).unwrap();
    struct Remove(i32);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = ipc::remove_sysv_queue(self.0);
        }
    }
    let _remove = Remove(outside);
    ipc::msg_send(outside, 1, b"outside").unwrap();
    // IPC_EXCL: creating succeeds only because the key is free in the new namespace.
    let inside: Vec<u8> = run_in_child(|| {
        ops::create(&[NsKind::Ipc])?;
        let id = ipc::create_sysv_queue_keyed(key)?;
        ipc::msg_send(id, 1, b"inside")?;
        ipc::msg_receive(id, 64)
    })
    .unwrap();
    assert_eq!(inside, b"inside");
    assert_eq!(ipc::msg_receive(outside, 64).unwrap(), b"outside");
    let err = ipc::msg_receive(outside, 64).unwrap_err();
    assert_eq!(err.errno(), Some(nix::errno::Errno::ENOMSG), "{err}");
}

#[test]
fn shared_memory_written_by_one_member_is_read_by_another() {
    let pod = Holder::spawn(&[NsKind::Ipc], || Ok(())).unwrap();
    let pod_ipc = pod.ns_path(NsKind::Ipc);
    let id: i32 = run_in_child(|| {
        ops::join_path(&pod_ipc, NsKind::Ipc)?;
        let id = ipc::create_sysv_shm(4096)?;
        ipc::shm_write(id, b"from the first container")?;
        Ok(id)
    })
    .unwrap();
    let read: Vec<u8> = run_in_child(|| {
        ops::join_path(&pod_ipc, NsKind::Ipc)?;
        let bytes = ipc::shm_read(id, 24)?;
        ipc::remove_sysv_shm(id)?;
        Ok(bytes)
    })
    .unwrap();
    assert_eq!(read, b"from the first container");
}

#[test]
fn a_posix_mqueue_made_inside_is_absent_outside() {
    let name = format!("/podlab-it-{}", std::process::id());
    let pod = Holder::spawn(&[NsKind::Ipc], || Ok(())).unwrap();
    let pod_ipc = pod.ns_path(NsKind::Ipc);
    let inside: bool = run_in_child(|| {
        ops::join_path(&pod_ipc, NsKind::Ipc)?;
        ipc::create_posix_mqueue(&name)?;
        ipc::posix_mqueue_exists(&name)
    })
    .unwrap();
    assert!(inside);
    assert!(!ipc::posix_mqueue_exists(&name).unwrap(), "{name} leaked");
    let after: bool = run_in_child(|| {
        ops::join_path(&pod_ipc, NsKind::Ipc)?;
        ipc::remove_posix_mqueue(&name)?;
        ipc::posix_mqueue_exists(&name)
    })
    .unwrap();
    assert!(!after, "{name} is removed");
}
