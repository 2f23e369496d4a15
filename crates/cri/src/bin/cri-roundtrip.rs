//! `cri-roundtrip SOCKET [ROUNDS]`: the round trip of the CRI's cheap calls on one connection,
//! the yardstick of issue 17's status and list targets (≤ 2× the runtime's own `Version`).
//!
//! One HTTP/2 connection to the unix socket (as a CRI client keeps one), then ROUNDS rounds
//! (default 200, after 20 unmeasured ones) that each make every call once, in turn: `Version`,
//! `Status`, `ListImages`, `ImageStatus` (the first listed image), `ListPodSandbox`,
//! `PodSandboxStatus` and `ListContainers` / `ContainerStatus` (of the first sandbox and
//! container listed, when there are any). Prints one line per call: median, p90, and the ratio
//! of the median to `Version`'s, then the same as JSON on the last line for scripts. Works
//! against any CRI runtime (podlab's, containerd's).
//!
//! A client of its own (h2 and the CRI's messages, no generated client): the server's crate has
//! no gRPC client, and a gRPC call is one HTTP/2 request with a 5-byte framed message.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use podlab_cri::proto;
use prost::Message;

/// The CRI's two services.
const RUNTIME: &str = "runtime.v1.RuntimeService";
const IMAGE: &str = "runtime.v1.ImageService";
const WARM_UP: usize = 20;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(socket) = args.first() else {
        eprintln!("usage: cri-roundtrip SOCKET [ROUNDS]");
        return std::process::ExitCode::from(2);
    };
    let rounds = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(200);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cri-roundtrip: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let socket = PathBuf::from(socket.strip_prefix("unix://").unwrap_or(socket));
    match runtime.block_on(measure(&socket, rounds)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cri-roundtrip: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

struct Client {
    h2: h2::client::SendRequest<Bytes>,
}

impl Client {
    async fn connect(socket: &std::path::Path) -> Result<Client> {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .with_context(|| format!("connecting to {}", socket.display()))?;
        let (h2, connection) = h2::client::handshake(stream)
            .await
            .context("HTTP/2 handshake")?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("cri-roundtrip: connection: {e}");
            }
        });
        Ok(Client { h2 })
    }

    /// One unary call: `service/method` with `request`, the answer decoded.
    async fn call<Req: Message, Resp: Message + Default>(
        &mut self,
        service: &str,
        method: &str,
        request: &Req,
    ) -> Result<Resp> {
        let http = http::Request::post(format!("http://localhost/{service}/{method}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())?;
        let message = request.encode_to_vec();
        let mut frame = Vec::with_capacity(5 + message.len());
        frame.push(0); // not compressed
        frame.extend_from_slice(&u32::try_from(message.len())?.to_be_bytes());
        frame.extend_from_slice(&message);
        let h2 = self.h2.clone().ready().await?;
        self.h2 = h2;
        let (response, mut send) = self.h2.send_request(http, false)?;
        send.send_data(Bytes::from(frame), true)?;
        let response = response.await.context(method.to_string())?;
        let (head, mut body) = response.into_parts();
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await?.unwrap_or_default();
        let status = trailers
            .get("grpc-status")
            .or_else(|| head.headers.get("grpc-status"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if status != "0" {
            let message = trailers
                .get("grpc-message")
                .or_else(|| head.headers.get("grpc-message"))
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            bail!("{method}: grpc-status {status:?}: {message}");
        }
        if data.len() < 5 {
            bail!("{method}: an answer without a message");
        }
        Ok(Resp::decode(&data[5..])?)
    }
}

/// One call to measure: its name and how to make it.
#[derive(Clone)]
enum Call {
    Version,
    Status,
    ListImages,
    ImageStatus(String),
    ListPodSandbox,
    PodSandboxStatus(String),
    ListContainers,
    ContainerStatus(String),
}

impl Call {
    fn name(&self) -> &'static str {
        match self {
            Call::Version => "Version",
            Call::Status => "Status",
            Call::ListImages => "ListImages",
            Call::ImageStatus(_) => "ImageStatus",
            Call::ListPodSandbox => "ListPodSandbox",
            Call::PodSandboxStatus(_) => "PodSandboxStatus",
            Call::ListContainers => "ListContainers",
            Call::ContainerStatus(_) => "ContainerStatus",
        }
    }

    async fn make(&self, client: &mut Client) -> Result<()> {
        match self {
            Call::Version => {
                client
                    .call::<_, proto::VersionResponse>(
                        RUNTIME,
                        "Version",
                        &proto::VersionRequest::default(),
                    )
                    .await?;
            }
            Call::Status => {
                client
                    .call::<_, proto::StatusResponse>(
                        RUNTIME,
                        "Status",
                        &proto::StatusRequest::default(),
                    )
                    .await?;
            }
            Call::ListImages => {
                client
                    .call::<_, proto::ListImagesResponse>(
                        IMAGE,
                        "ListImages",
                        &proto::ListImagesRequest::default(),
                    )
                    .await?;
            }
            Call::ImageStatus(image) => {
                let request = proto::ImageStatusRequest {
                    image: Some(proto::ImageSpec {
                        image: image.clone(),
                        ..Default::default()
                    }),
                    verbose: false,
                };
                client
                    .call::<_, proto::ImageStatusResponse>(IMAGE, "ImageStatus", &request)
                    .await?;
            }
            Call::ListPodSandbox => {
                client
                    .call::<_, proto::ListPodSandboxResponse>(
                        RUNTIME,
                        "ListPodSandbox",
                        &proto::ListPodSandboxRequest::default(),
                    )
                    .await?;
            }
            Call::PodSandboxStatus(id) => {
                let request = proto::PodSandboxStatusRequest {
                    pod_sandbox_id: id.clone(),
                    verbose: false,
                };
                client
                    .call::<_, proto::PodSandboxStatusResponse>(
                        RUNTIME,
                        "PodSandboxStatus",
                        &request,
                    )
                    .await?;
            }
            Call::ListContainers => {
                client
                    .call::<_, proto::ListContainersResponse>(
                        RUNTIME,
                        "ListContainers",
                        &proto::ListContainersRequest::default(),
                    )
                    .await?;
            }
            Call::ContainerStatus(id) => {
                let request = proto::ContainerStatusRequest {
                    container_id: id.clone(),
                    verbose: false,
                };
                client
                    .call::<_, proto::ContainerStatusResponse>(RUNTIME, "ContainerStatus", &request)
                    .await?;
            }
        }
        Ok(())
    }
}

async fn measure(socket: &std::path::Path, rounds: usize) -> Result<()> {
    let mut client = Client::connect(socket).await?;
    let images: proto::ListImagesResponse = client
        .call(IMAGE, "ListImages", &proto::ListImagesRequest::default())
        .await?;
    let sandboxes: proto::ListPodSandboxResponse = client
        .call(
            RUNTIME,
            "ListPodSandbox",
            &proto::ListPodSandboxRequest::default(),
        )
        .await?;
    let containers: proto::ListContainersResponse = client
        .call(
            RUNTIME,
            "ListContainers",
            &proto::ListContainersRequest::default(),
        )
        .await?;
    let mut calls = vec![Call::Version, Call::Status, Call::ListImages];
    if let Some(image) = images.images.first() {
        calls.push(Call::ImageStatus(image.id.clone()));
    }
    calls.push(Call::ListPodSandbox);
    if let Some(sandbox) = sandboxes.items.first() {
        calls.push(Call::PodSandboxStatus(sandbox.id.clone()));
    }
    calls.push(Call::ListContainers);
    if let Some(container) = containers.containers.first() {
        calls.push(Call::ContainerStatus(container.id.clone()));
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(rounds); calls.len()];
    for round in 0..WARM_UP + rounds {
        for (i, call) in calls.iter().enumerate() {
            let started = Instant::now();
            call.make(&mut client).await?;
            if round >= WARM_UP {
                times[i].push(started.elapsed());
            }
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let stats: Vec<(&str, f64, f64)> = calls
        .iter()
        .zip(times.iter_mut())
        .map(|(call, samples)| {
            samples.sort();
            let median = ms(samples[samples.len() / 2]);
            let p90 = ms(samples[(samples.len() * 9 / 10).min(samples.len() - 1)]);
            (call.name(), median, p90)
        })
        .collect();
    let version = stats[0].1;
    println!(
        "{} images, {} sandboxes, {} containers listed; {rounds} rounds on one connection",
        images.images.len(),
        sandboxes.items.len(),
        containers.containers.len()
    );
    println!(
        "{:<18} {:>10} {:>10} {:>12}",
        "call", "median ms", "p90 ms", "÷ Version"
    );
    for (name, median, p90) in &stats {
        println!(
            "{name:<18} {median:>10.3} {p90:>10.3} {:>12.2}",
            median / version
        );
    }
    let json: Vec<String> = stats
        .iter()
        .map(|(name, median, p90)| {
            format!("\"{name}\": {{\"median_ms\": {median:.4}, \"p90_ms\": {p90:.4}}}")
        })
        .collect();
    println!("{{{}}}", json.join(", "));
    Ok(())
}
