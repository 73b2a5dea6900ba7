# kopper's container image: the static kopper binary on an empty base, with CA certificates
# (for API servers and S3 endpoints) and a non-root user. Nothing else: no shell, no package
# manager. Runs with a read-only root filesystem and every capability dropped.
#
# Built by scripts/image.sh from a context it assembles (target/image/), since no base image
# can be pulled: the binary is built with `-C target-feature=+crt-static` on the gnu target.
FROM scratch
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY passwd group /etc/
COPY kopper /usr/local/bin/kopper
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kopper"]
CMD ["run"]
