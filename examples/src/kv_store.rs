//! An in-memory implementation of `kv.KeyValue`.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::RwLock;

use rpc_core::{Request, Response, Status};

use crate::kv::key_value_server::KeyValue;
use crate::kv::{
    DeleteRequest, DeleteResponse, Entry, GetRequest, GetResponse, PutRequest, PutResponse,
    ScanRequest, ScanResponse,
};

/// Largest page a scan returns (also used when the request's limit is 0).
pub const MAX_SCAN_PAGE: usize = 1000;
/// Largest key accepted.
pub const MAX_KEY_LEN: usize = 4096;

/// A sorted map behind a read-write lock: reads run in parallel.
#[derive(Debug, Default)]
pub struct MemoryStore {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
}

fn check_key(key: &[u8]) -> Result<(), Status> {
    if key.is_empty() {
        return Err(Status::invalid_argument("key must not be empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Status::invalid_argument(format!(
            "key of {} bytes exceeds {MAX_KEY_LEN} bytes",
            key.len()
        )));
    }
    Ok(())
}

impl MemoryStore {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[rpc_core::async_trait]
impl KeyValue for MemoryStore {
    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let key = request.into_inner().key;
        check_key(&key)?;
        let value = self.read().get(&key).cloned();
        Ok(Response::new(GetResponse { value }))
    }

    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let PutRequest { key, value } = request.into_inner();
        check_key(&key)?;
        let previous = self.write().insert(key, value);
        Ok(Response::new(PutResponse { previous }))
    }

    async fn delete(
        &self,
        request: Request<DeleteRequest>,
    ) -> Result<Response<DeleteResponse>, Status> {
        let key = request.into_inner().key;
        check_key(&key)?;
        let existed = self.write().remove(&key).is_some();
        Ok(Response::new(DeleteResponse { existed }))
    }

    async fn scan(&self, request: Request<ScanRequest>) -> Result<Response<ScanResponse>, Status> {
        let ScanRequest {
            start_key,
            end_key,
            limit,
        } = request.into_inner();
        if !end_key.is_empty() && end_key < start_key {
            return Err(Status::invalid_argument("end_key sorts before start_key"));
        }
        let page = match limit as usize {
            0 => MAX_SCAN_PAGE,
            n => n.min(MAX_SCAN_PAGE),
        };
        let end = if end_key.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(end_key)
        };
        let map = self.read();
        let mut it = map.range((Bound::Included(start_key), end));
        let entries: Vec<Entry> = it
            .by_ref()
            .take(page)
            .map(|(k, v)| Entry {
                key: k.clone(),
                value: v.clone(),
            })
            .collect();
        let next_key = it.next().map(|(k, _)| k.clone()).unwrap_or_default();
        Ok(Response::new(ScanResponse { entries, next_key }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn put_get_delete_and_paged_scan() {
        let s = MemoryStore::default();
        run(async {
            for i in 0..5u8 {
                let put = PutRequest {
                    key: vec![b'k', i],
                    value: vec![i],
                };
                assert_eq!(
                    s.put(Request::new(put))
                        .await
                        .unwrap()
                        .into_inner()
                        .previous,
                    None
                );
            }
            let got = s
                .get(Request::new(GetRequest { key: vec![b'k', 3] }))
                .await
                .unwrap();
            assert_eq!(got.into_inner().value, Some(vec![3]));
            let page = s
                .scan(Request::new(ScanRequest {
                    start_key: vec![b'k', 1],
                    end_key: vec![],
                    limit: 2,
                }))
                .await
                .unwrap()
                .into_inner();
            assert_eq!(page.entries.len(), 2);
            assert_eq!(page.next_key, vec![b'k', 3]);
            let del = s
                .delete(Request::new(DeleteRequest { key: vec![b'k', 3] }))
                .await
                .unwrap();
            assert!(del.into_inner().existed);
            let err = s
                .get(Request::new(GetRequest { key: vec![] }))
                .await
                .unwrap_err();
            assert_eq!(err.code(), rpc_core::Code::InvalidArgument);
        });
    }
}
