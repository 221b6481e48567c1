//! The reflection service: a [`Builder`] takes the descriptor sets of the services
//! a server offers and builds the v1 or v1alpha service that describes them.

use std::fmt;

use prost_types::FileDescriptorSet;

mod answer;
mod state;
pub mod v1;
pub mod v1alpha;

pub use answer::ServerReflectionInfoStream;
use state::ReflectionServiceState;

/// Configures and builds a reflection service, as tonic-reflection's `Builder`.
#[derive(Debug)]
pub struct Builder<'b> {
    file_descriptor_sets: Vec<FileDescriptorSet>,
    encoded_file_descriptor_sets: Vec<&'b [u8]>,
    include_reflection_service: bool,
    service_names: Vec<String>,
    use_all_service_names: bool,
}

impl<'b> Builder<'b> {
    /// A builder with no descriptors yet, that will describe the reflection service
    /// itself and every service of the sets registered.
    pub fn configure() -> Self {
        Builder {
            file_descriptor_sets: Vec::new(),
            encoded_file_descriptor_sets: Vec::new(),
            include_reflection_service: true,
            service_names: Vec::new(),
            use_all_service_names: true,
        }
    }

    /// Registers a parsed descriptor set.
    #[must_use]
    pub fn register_file_descriptor_set(mut self, file_descriptor_set: FileDescriptorSet) -> Self {
        self.file_descriptor_sets.push(file_descriptor_set);
        self
    }

    /// Registers an encoded descriptor set (as `rpc_codegen::configure()
    /// .file_descriptor_set_path(..)` writes one, included with `include_bytes!`).
    #[must_use]
    pub fn register_encoded_file_descriptor_set(mut self, encoded: &'b [u8]) -> Self {
        self.encoded_file_descriptor_sets.push(encoded);
        self
    }

    /// Whether the reflection service describes itself too (default: yes).
    #[must_use]
    pub fn include_reflection_service(mut self, include: bool) -> Self {
        self.include_reflection_service = include;
        self
    }

    /// Lists the service `name` (`package.Service`). Once called, only the services
    /// named this way are listed (their descriptors can still be asked for by symbol).
    #[must_use]
    pub fn with_service_name(mut self, name: impl Into<String>) -> Self {
        self.use_all_service_names = false;
        self.service_names.push(name.into());
        self
    }

    /// Builds the `grpc.reflection.v1.ServerReflection` service.
    ///
    /// # Errors
    /// A registered set that does not decode, or a file or symbol without a name.
    pub fn build_v1(
        mut self,
    ) -> Result<v1::ServerReflectionServer<impl v1::ServerReflection>, Error> {
        if self.include_reflection_service {
            self = self.register_encoded_file_descriptor_set(crate::pb::v1::FILE_DESCRIPTOR_SET);
        }
        let state = self.into_state()?;
        Ok(v1::ServerReflectionServer::new(v1::ReflectionService::new(
            state,
        )))
    }

    /// Builds the `grpc.reflection.v1alpha.ServerReflection` service, for clients
    /// that know only the older version.
    ///
    /// # Errors
    /// As [`Builder::build_v1`].
    pub fn build_v1alpha(
        mut self,
    ) -> Result<v1alpha::ServerReflectionServer<impl v1alpha::ServerReflection>, Error> {
        if self.include_reflection_service {
            self =
                self.register_encoded_file_descriptor_set(crate::pb::v1alpha::FILE_DESCRIPTOR_SET);
        }
        let state = self.into_state()?;
        Ok(v1alpha::ServerReflectionServer::new(
            v1alpha::ReflectionService::new(state),
        ))
    }

    fn into_state(self) -> Result<ReflectionServiceState, Error> {
        ReflectionServiceState::new(
            self.service_names,
            self.encoded_file_descriptor_sets,
            self.file_descriptor_sets,
            self.use_all_service_names,
        )
    }
}

/// Why a reflection service could not be built.
#[derive(Debug)]
pub enum Error {
    /// A registered encoded set did not decode as a `FileDescriptorSet`.
    DecodeError(prost::DecodeError),
    /// A file, message, field, service... without a name.
    InvalidFileDescriptorSet(String),
}

impl From<prost::DecodeError> for Error {
    fn from(e: prost::DecodeError) -> Self {
        Error::DecodeError(e)
    }
}

impl std::error::Error for Error {}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::DecodeError(e) => write!(f, "decoding a FileDescriptorSet: {e}"),
            Error::InvalidFileDescriptorSet(s) => write!(f, "invalid FileDescriptorSet: {s}"),
        }
    }
}
