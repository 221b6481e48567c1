//! The streaming example services over the in-process loopback transport (bounded
//! queues, no RDMA): what the `route-guide` and `file-transfer` programs print
//! rests on these answers.

use bytes::Bytes;
use codegen_tests::loopback::Loopback;
use examples::checksum::Fnv1a;
use examples::file_store::{FileStore, CHUNK_SIZE};
use examples::filetransfer::file_transfer_client::FileTransferClient;
use examples::filetransfer::file_transfer_server::FileTransferServer;
use examples::filetransfer::{Chunk, FileName};
use examples::route_guide::RouteGuideService;
use examples::routeguide::route_guide_client::RouteGuideClient;
use examples::routeguide::route_guide_server::RouteGuideServer;
use examples::routeguide::{Point, Rectangle, RouteNote};
use futures_util::stream;
use rpc_core::Code;

fn point(latitude: i32, longitude: i32) -> Point {
    Point {
        latitude,
        longitude,
    }
}

#[tokio::test]
async fn the_route_guide_answers_each_shape() {
    let mut client = RouteGuideClient::new(Loopback::new(RouteGuideServer::new(
        RouteGuideService::sample(),
    )));
    let named = client
        .get_feature(point(407_838_351, -746_143_763))
        .await
        .unwrap();
    assert_eq!(named.into_inner().name, "Harbour light");

    let rect = Rectangle {
        lo: Some(point(420_000_000, -730_000_000)),
        hi: Some(point(400_000_000, -750_000_000)),
    };
    let mut listed = client.list_features(rect).await.unwrap().into_inner();
    let mut names = Vec::new();
    while let Some(f) = listed.message().await.unwrap() {
        names.push(f.name);
    }
    assert_eq!(names.len(), 5, "{names:?}");
    assert!(!names.contains(&"Far lighthouse".to_owned()));

    let route = [
        point(407_838_351, -746_143_763),
        point(408_122_808, -743_999_179),
    ];
    let summary = client
        .record_route(stream::iter(route))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((summary.point_count, summary.feature_count), (2, 2));
    // About 18 km between the two (haversine).
    assert!((17_000..19_000).contains(&summary.distance), "{summary:?}");

    let notes = [(1, "a"), (2, "b"), (1, "c")].map(|(at, m)| RouteNote {
        location: Some(point(at, at)),
        message: m.into(),
    });
    let mut chat = client
        .route_chat(stream::iter(notes))
        .await
        .unwrap()
        .into_inner();
    let mut replies = Vec::new();
    while let Some(n) = chat.message().await.unwrap() {
        replies.push(n.message);
    }
    assert_eq!(
        replies,
        ["a", "b", "a", "c"],
        "every note taken at the place so far"
    );
}

fn upload_chunks(name: &str, data: &Bytes) -> Vec<Chunk> {
    (0..data.len())
        .step_by(CHUNK_SIZE)
        .enumerate()
        .map(|(i, start)| Chunk {
            name: if i == 0 { name.into() } else { String::new() },
            data: data.slice(start..(start + CHUNK_SIZE).min(data.len())),
        })
        .collect()
}

#[tokio::test]
async fn a_file_comes_back_in_whole_chunks_with_the_same_checksum() {
    let mut client =
        FileTransferClient::new(Loopback::new(FileTransferServer::new(FileStore::default())));
    // Two and a half chunks of bytes that differ from chunk to chunk.
    let data: Bytes = (0..CHUNK_SIZE * 5 / 2)
        .map(|i| (i % 251) as u8 ^ (i / CHUNK_SIZE) as u8)
        .collect();
    let mut want = Fnv1a::default();
    want.update(&data);

    let stored = client
        .upload(stream::iter(upload_chunks("f", &data)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (stored.name.as_str(), stored.size),
        ("f", data.len() as u64)
    );
    assert_eq!(stored.checksum, want.value());

    let mut download = client
        .download(FileName { name: "f".into() })
        .await
        .unwrap()
        .into_inner();
    let (mut sizes, mut back, mut got) = (Vec::new(), Fnv1a::default(), Vec::new());
    while let Some(chunk) = download.message().await.unwrap() {
        sizes.push(chunk.data.len());
        back.update(&chunk.data);
        got.extend_from_slice(&chunk.data);
    }
    assert_eq!(sizes, [CHUNK_SIZE, CHUNK_SIZE, CHUNK_SIZE / 2]);
    assert_eq!(back.value(), want.value());
    assert!(got == data, "the same bytes in the same order");
}

#[tokio::test]
async fn bad_uploads_and_unknown_files_say_why() {
    let mut client =
        FileTransferClient::new(Loopback::new(FileTransferServer::new(FileStore::default())));
    let none = client.upload(stream::iter(Vec::<Chunk>::new())).await;
    assert_eq!(none.unwrap_err().code(), Code::InvalidArgument);
    let unnamed = client
        .upload(stream::iter([Chunk {
            name: String::new(),
            data: Bytes::from_static(b"x"),
        }]))
        .await;
    assert_eq!(unnamed.unwrap_err().code(), Code::InvalidArgument);
    let absent = client
        .download(FileName {
            name: "nope".into(),
        })
        .await;
    assert_eq!(absent.unwrap_err().code(), Code::NotFound);
}
