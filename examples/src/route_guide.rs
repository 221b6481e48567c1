//! The route guide service: a feature map answered with each of the four call
//! shapes.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use rpc_core::{Request, Response, Status, Streaming};

use crate::routeguide::route_guide_server::RouteGuide;
use crate::routeguide::{Feature, Point, Rectangle, RouteNote, RouteSummary};

/// Features at fixed points, shared by the calls.
#[derive(Debug, Clone)]
pub struct RouteGuideService {
    features: Arc<Vec<Feature>>,
}

impl RouteGuideService {
    /// A guide to `features`.
    pub fn new(features: Vec<Feature>) -> Self {
        RouteGuideService {
            features: Arc::new(features),
        }
    }

    /// A small map of named places (degrees × 10⁷).
    pub fn sample() -> Self {
        let place = |name: &str, latitude, longitude| Feature {
            name: name.into(),
            location: Some(Point {
                latitude,
                longitude,
            }),
        };
        Self::new(vec![
            place("Harbour light", 407_838_351, -746_143_763),
            place("Old mill", 408_122_808, -743_999_179),
            place("Ridge trail", 413_628_156, -749_015_468),
            place("Ferry pier", 419_999_544, -740_371_136),
            place("Summit cairn", 414_008_389, -743_951_297),
            place("Far lighthouse", 439_999_999, -759_999_999),
        ])
    }
}

/// Whether `p` is inside the rectangle with corners `r.lo` and `r.hi` (either way
/// round).
pub fn in_range(p: &Point, r: &Rectangle) -> bool {
    let (lo, hi) = (r.lo.unwrap_or_default(), r.hi.unwrap_or_default());
    let lat = lo.latitude.min(hi.latitude)..=lo.latitude.max(hi.latitude);
    let lng = lo.longitude.min(hi.longitude)..=lo.longitude.max(hi.longitude);
    lat.contains(&p.latitude) && lng.contains(&p.longitude)
}

/// Great-circle distance in metres (haversine).
pub fn distance(a: &Point, b: &Point) -> i32 {
    const EARTH_RADIUS_M: f64 = 6_371_000.0;
    let deg = |v: i32| f64::from(v) / 1e7;
    let (lat1, lat2) = (deg(a.latitude).to_radians(), deg(b.latitude).to_radians());
    let d_lat = lat2 - lat1;
    let d_lng = (deg(b.longitude) - deg(a.longitude)).to_radians();
    let h = (d_lat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (d_lng / 2.0).sin().powi(2);
    (EARTH_RADIUS_M * 2.0 * h.sqrt().atan2((1.0 - h).sqrt())) as i32
}

type NoteStream = Pin<Box<dyn Stream<Item = Result<RouteNote, Status>> + Send>>;

#[rpc_core::async_trait]
impl RouteGuide for RouteGuideService {
    async fn get_feature(&self, request: Request<Point>) -> Result<Response<Feature>, Status> {
        let at = request.into_inner();
        let found = self.features.iter().find(|f| f.location == Some(at));
        Ok(Response::new(found.cloned().unwrap_or(Feature {
            name: String::new(),
            location: Some(at),
        })))
    }

    type ListFeaturesStream =
        futures_util::stream::Iter<std::vec::IntoIter<Result<Feature, Status>>>;

    async fn list_features(
        &self,
        request: Request<Rectangle>,
    ) -> Result<Response<Self::ListFeaturesStream>, Status> {
        let rect = request.into_inner();
        let found: Vec<_> = self
            .features
            .iter()
            .filter(|f| f.location.is_some_and(|p| in_range(&p, &rect)))
            .cloned()
            .map(Ok)
            .collect();
        Ok(Response::new(futures_util::stream::iter(found)))
    }

    async fn record_route(
        &self,
        request: Request<Streaming<Point>>,
    ) -> Result<Response<RouteSummary>, Status> {
        let started = std::time::Instant::now();
        let mut points = request.into_inner();
        let mut summary = RouteSummary::default();
        let mut last: Option<Point> = None;
        while let Some(p) = points.message().await? {
            summary.point_count += 1;
            if self.features.iter().any(|f| f.location == Some(p)) {
                summary.feature_count += 1;
            }
            if let Some(last) = last {
                summary.distance += distance(&last, &p);
            }
            last = Some(p);
        }
        summary.elapsed_time = started.elapsed().as_secs() as i32;
        Ok(Response::new(summary))
    }

    type RouteChatStream = NoteStream;

    async fn route_chat(
        &self,
        request: Request<Streaming<RouteNote>>,
    ) -> Result<Response<NoteStream>, Status> {
        // For each note, every note taken at its location so far (itself included).
        let mut taken: HashMap<(i32, i32), Vec<RouteNote>> = HashMap::new();
        let replies = request.into_inner().flat_map(move |note| {
            let replies = match note {
                Ok(note) => {
                    let at = note.location.unwrap_or_default();
                    let here = taken.entry((at.latitude, at.longitude)).or_default();
                    here.push(note);
                    here.iter().cloned().map(Ok).collect()
                }
                Err(status) => vec![Err(status)],
            };
            futures_util::stream::iter(replies)
        });
        Ok(Response::new(Box::pin(replies)))
    }
}
