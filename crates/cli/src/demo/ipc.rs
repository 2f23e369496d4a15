//! `podlab demo ipc`: IPC objects made in a pod's ipc namespace are shared by its containers and
//! invisible to the host.

use anyhow::Result;
use podlab_ns::ipc::{self, SysvObject};
use podlab_ns::ops::{self, Holder};
use podlab_ns::{child, NsKind};
use serde::{Deserialize, Serialize};

use super::uts::side_by_side;
use super::{say, Evidence};

/// The SysV key of every object the demo makes ("podl"): a key, unlike an id, means the same
/// thing in every namespace, so looking it up on the host side is a fair test.
const KEY: i32 = 0x706f_646c;
const MQUEUE: &str = "/podlab-demo";
const GREETING: &str = "hello from container A";

/// What "container A" made inside the pod's ipc namespace.
#[derive(Serialize, Deserialize)]
struct Made {
    queue: i32,
    semaphores: i32,
    shm: i32,
}

/// What a process in the pod's ipc namespace sees there.
#[derive(Serialize, Deserialize)]
struct Seen {
    sysv: Vec<SysvObject>,
    mqueue: bool,
}

impl Seen {
    fn read() -> podlab_ns::Result<Seen> {
        Ok(Seen {
            sysv: ipc::list_sysv()?,
            mqueue: ipc::posix_mqueue_exists(MQUEUE)?,
        })
    }

    fn has_key(&self) -> bool {
        self.sysv.iter().any(|o| o.key == KEY)
    }
}

pub fn run(evidence: &mut Evidence) -> Result<()> {
    say("An ipc namespace has its own System V message queues, semaphore sets and shared memory");
    say("segments, and its own POSIX message queues. A pod has one, held by its pause process:");
    say("its containers share memory and queues with each other, and never with other pods.");
    say("");
    say("A sleeping holder process (the pause process's role) unshares a new ipc namespace.");
    let holder = Holder::spawn(&[NsKind::Ipc], || Ok(()))?;
    let host_inode = ops::self_inode(NsKind::Ipc)?;
    let pod_inode = holder.inode(NsKind::Ipc)?;
    let host_before = Seen::read()?;

    say("\"Container A\" joins it (setns) and makes a message queue, a semaphore set and a shared");
    say(format!(
        "memory segment under key {KEY:#x}, writes \"{GREETING}\" to the segment, sends \"ping\""
    ));
    say(format!(
        "on the queue and makes POSIX mqueue {MQUEUE}. Then it exits; the objects stay with the"
    ));
    say("namespace, not with the process that made them.");
    let pod_ipc = holder.ns_path(NsKind::Ipc);
    let made: Made = child::run_in_child(|| {
        ops::join_path(&pod_ipc, NsKind::Ipc)?;
        let made = Made {
            queue: ipc::create_sysv_queue_keyed(KEY)?,
            semaphores: ipc::create_sysv_semaphores_keyed(KEY, 1)?,
            shm: ipc::create_sysv_shm_keyed(KEY, 4096)?,
        };
        ipc::shm_write(made.shm, GREETING.as_bytes())?;
        ipc::msg_send(made.queue, 1, b"ping")?;
        ipc::create_posix_mqueue(MQUEUE)?;
        Ok(made)
    })?;

    say("\"Container B\" joins the same namespace and looks:");
    let (inside, shm_text, message): (Seen, String, String) = child::run_in_child(|| {
        ops::join_path(&pod_ipc, NsKind::Ipc)?;
        let seen = Seen::read()?;
        let text = ipc::shm_read(made.shm, GREETING.len())?;
        let message = ipc::msg_receive(made.queue, 64)?;
        Ok((
            seen,
            String::from_utf8_lossy(&text).into_owned(),
            String::from_utf8_lossy(&message).into_owned(),
        ))
    })?;
    let host = Seen::read()?;
    side_by_side(
        ("host", "pod"),
        &[
            (
                "ipc namespace",
                &format!("ipc:[{host_inode}]"),
                &format!("ipc:[{pod_inode}]"),
            ),
            (
                "SysV objects",
                &objects_text(&host.sysv),
                &objects_text(&inside.sysv),
            ),
            (
                &format!("key {KEY:#x}"),
                &present(host.has_key()),
                &present(inside.has_key()),
            ),
            (
                &format!("mqueue {MQUEUE}"),
                &present(host.mqueue),
                &present(inside.mqueue),
            ),
        ],
    );
    say(format!(
        "Container B read \"{shm_text}\" from the segment and \"{message}\" from the queue."
    ));
    say("(Ids are numbered per namespace, from 0: the host may have an object with the same id");
    say("that has nothing to do with these. Keys and names are what the two sides could share.)");

    evidence.compare(
        "the pod has its own ipc namespace (inode ids differ)",
        host_inode,
        pod_inode,
        false,
    );
    let made_ids = [
        (ipc::SysvKind::Queue, made.queue),
        (ipc::SysvKind::Semaphores, made.semaphores),
        (ipc::SysvKind::SharedMemory, made.shm),
    ];
    let all_inside = made_ids.iter().all(|(kind, id)| {
        inside
            .sysv
            .iter()
            .any(|o| o.kind == *kind && o.id == *id && o.key == KEY)
    });
    evidence.check(
        "container B sees the queue, semaphores and segment that container A made",
        all_inside,
        objects_text(&inside.sysv),
    );
    evidence.compare(
        "container B sees the POSIX mqueue",
        inside.mqueue,
        true,
        true,
    );
    evidence.compare(
        "container B reads what container A wrote to the shared memory",
        shm_text.as_str(),
        GREETING,
        true,
    );
    evidence.compare(
        "container B receives container A's message",
        message.as_str(),
        "ping",
        true,
    );
    evidence.check(
        format!("the host's /proc/sysvipc has nothing under key {KEY:#x}"),
        !host.has_key() && !host_before.has_key(),
        format!(
            "before: {}, during: {}",
            present(host_before.has_key()),
            present(host.has_key())
        ),
    );
    evidence.check(
        format!("the host has no mqueue {MQUEUE}"),
        !host.mqueue && !host_before.mqueue,
        format!(
            "before: {}, during: {}",
            present(host_before.mqueue),
            present(host.mqueue)
        ),
    );

    say("Removing them (IPC_RMID, mq_unlink) from inside, then looking again:");
    let after: Seen = child::run_in_child(|| {
        ops::join_path(&pod_ipc, NsKind::Ipc)?;
        ipc::remove_sysv_queue(made.queue)?;
        ipc::remove_sysv_semaphores(made.semaphores)?;
        ipc::remove_sysv_shm(made.shm)?;
        ipc::remove_posix_mqueue(MQUEUE)?;
        Seen::read()
    })?;
    say(format!(
        "  pod: SysV objects {}, mqueue {MQUEUE} {}",
        objects_text(&after.sysv),
        present(after.mqueue)
    ));
    holder.kill();
    say("The holder is gone, and with it the namespace: whatever would have been left in it");
    say("would have gone too. That is also why a pod's IPC never outlives the pod.");
    evidence.check(
        "nothing is left in the pod's ipc namespace after removal",
        after.sysv.is_empty() && !after.mqueue,
        format!(
            "{}, mqueue {}",
            objects_text(&after.sysv),
            present(after.mqueue)
        ),
    );
    Ok(())
}

/// "queue 0, semaphores 0, shared_memory 1" or "none".
fn objects_text(objects: &[SysvObject]) -> String {
    if objects.is_empty() {
        return "none".into();
    }
    if objects.len() > 6 {
        return format!("{} objects", objects.len());
    }
    let names: Vec<String> = objects
        .iter()
        .map(|o| format!("{} {}", kind_word(o.kind), o.id))
        .collect();
    names.join(", ")
}

fn kind_word(kind: ipc::SysvKind) -> &'static str {
    match kind {
        ipc::SysvKind::Queue => "msg",
        ipc::SysvKind::Semaphores => "sem",
        ipc::SysvKind::SharedMemory => "shm",
    }
}

fn present(yes: bool) -> String {
    if yes { "present" } else { "absent" }.to_string()
}
