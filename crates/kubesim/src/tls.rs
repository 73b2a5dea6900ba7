//! HTTPS for kubesim: a certificate authority and a serving certificate made at start-up,
//! and a listener that completes TLS handshakes before axum sees a connection.
//!
//! kubectl (client-go) sends bearer tokens only over TLS, so without this a user's
//! kubeconfig is useless against a server that authorizes by token. Each server makes its own
//! CA: nothing is written to disk or trusted beyond the kubeconfigs and clients it hands out.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

/// A client that connects and never finishes its handshake is dropped after this long, so
/// it holds no task for ever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The CA clients must trust and the server's TLS configuration, which presents a
/// certificate that CA signed.
pub struct Certificates {
    /// The CA certificate, PEM-encoded, as a kubeconfig's `certificate-authority-data` holds it.
    pub ca_pem: String,
    /// The CA certificate, DER-encoded, as kube-rs' `root_cert` takes it.
    pub ca_der: Vec<u8>,
    server: Arc<rustls::ServerConfig>,
}

impl Certificates {
    /// Makes a fresh CA and a serving certificate for `localhost`, the loopback addresses
    /// and `bind` (when it is a specific address), so clients can reach the server by any
    /// of the names it is likely to be given.
    pub fn generate(bind: IpAddr) -> Result<Self, CertificateError> {
        let ca = certificate_authority()?;
        let server_key = KeyPair::generate()?;
        let server_cert = serving_params(bind)?.signed_by(&server_key, &ca)?;
        let chain = vec![server_cert.der().clone(), ca.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        // axum serves HTTP/1.1 only here; saying so lets HTTP/2-capable clients settle at once.
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self { ca_pem: ca.pem(), ca_der: ca.der().to_vec(), server: Arc::new(server) })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("could not generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("could not set up TLS with the generated certificate: {0}")]
    Tls(#[from] rustls::Error),
}

impl From<CertificateError> for std::io::Error {
    fn from(error: CertificateError) -> Self {
        std::io::Error::other(error)
    }
}

fn certificate_authority() -> Result<CertifiedIssuer<'static, KeyPair>, rcgen::Error> {
    let mut params = CertificateParams::default();
    params.distinguished_name = common_name("kubesim-ca");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    CertifiedIssuer::self_signed(params, KeyPair::generate()?)
}

fn serving_params(bind: IpAddr) -> Result<CertificateParams, rcgen::Error> {
    let mut addresses = vec![IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::LOCALHOST)];
    if !bind.is_unspecified() && !addresses.contains(&bind) {
        addresses.push(bind);
    }
    let mut params = CertificateParams::default();
    params.distinguished_name = common_name("kubesim");
    params.subject_alt_names = std::iter::once(SanType::DnsName("localhost".try_into()?))
        .chain(addresses.into_iter().map(SanType::IpAddress))
        .collect();
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    Ok(params)
}

fn common_name(name: &str) -> DistinguishedName {
    let mut distinguished_name = DistinguishedName::new();
    distinguished_name.push(DnType::CommonName, name);
    distinguished_name
}

/// Connections that have completed their TLS handshake. Handshakes run in their own tasks,
/// so one slow or silent client never holds up the others.
pub struct TlsListener {
    established: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` until `shutdown` is cancelled.
    pub fn new(
        tcp: TcpListener,
        certificates: &Certificates,
        shutdown: CancellationToken,
    ) -> std::io::Result<Self> {
        let local_addr = tcp.local_addr()?;
        let (sender, established) = mpsc::channel(64);
        let acceptor = TlsAcceptor::from(certificates.server.clone());
        tokio::spawn(accept_connections(tcp, acceptor, sender, shutdown));
        Ok(Self { established, local_addr })
    }
}

async fn accept_connections(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    established: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    shutdown: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = tcp.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(connection) => connection,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %e, "could not accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // See `Server::start`: watch events are small writes that Nagle would delay.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let (acceptor, established) = (acceptor.clone(), established.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = established.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.established.recv().await {
            Some(connection) => connection,
            // The accept loop ended because the server is shutting down; axum stops asking.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serving_certificate_names_loopback_and_a_specific_bind_address() {
        let bind: IpAddr = "10.1.2.3".parse().unwrap();
        let names = serving_params(bind).unwrap().subject_alt_names;
        assert!(names.contains(&SanType::DnsName("localhost".try_into().unwrap())));
        assert!(names.contains(&SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))));
        assert!(names.contains(&SanType::IpAddress(bind)));
        let unspecified = serving_params(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).unwrap().subject_alt_names;
        assert!(!unspecified.contains(&SanType::IpAddress(IpAddr::V4(Ipv4Addr::UNSPECIFIED))));
    }
}
