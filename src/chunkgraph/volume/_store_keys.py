"""Every option an object store takes, classified once: secret or public.

Policy. ``storage_options`` are obstore's config keys (``S3Config``,
``GCSConfig``, ``AzureConfig``), its client keys (``ClientConfig``) and
chunkgraph's own retry keys (``STORE_TIMEOUT_KEYS``). Each canonical name is in
``OPTION_KINDS`` as ``"secret"`` or ``"public"``:

* secret: what lets its holder read, write or decrypt data, or points at such a
  thing on this machine: access keys, secret keys, session and bearer tokens,
  SSE-C customer keys, Azure account/SAS keys and client secrets, service-account
  keys and their file paths, token files, and client settings that can carry
  credentials (a proxy URL with a password, default headers with an
  ``Authorization``). Never shown, never written, never pickled (``StoreOptions``).
* public: where the data is and how to talk to it (endpoint, region, bucket,
  timeouts, encryption *algorithm*, a KMS key's *id*, which IAM decides who may use).

A name is looked up after the spellings obstore also accepts are folded onto
the canonical one (``aws_``/``google_``/``azure_storage_``/``azure_`` prefixes, a
few aliases; ``canonical``). A name not in the table is secret when it contains a
word that credentials' names contain (``_SECRET_WORDS``): a misspelled
``secret_acess_key`` must not be printed in the error saying obstore does not know it.

A test reads obstore's own stubs and fails when obstore grows a key this table
does not classify (``tests/volume/test_store_keys.py``).

    >>> [is_secret_key(k) for k in ("region", "AWS_SSE_CUSTOMER_KEY_BASE64", "secret_acess_key")]
    [False, True, True]
"""

from __future__ import annotations

from typing import Literal

OptionKind = Literal["secret", "public"]

# chunkgraph's own keys, passed to obstore's retry_config (``_object_store``).
STORE_TIMEOUT_KEYS = ("retry_timeout", "max_retries")

# fmt: off
OPTION_KINDS: dict[str, OptionKind] = {
    # S3 (S3Config)
    "access_key_id": "secret",
    "secret_access_key": "secret",
    "session_token": "secret",
    "sse_customer_key_base64": "secret",
    "container_authorization_token_file": "secret",
    "web_identity_token_file": "secret",
    "container_credentials_relative_uri": "secret",  # where the container's credentials are
    "container_credentials_full_uri": "secret",
    "aws_endpoint_url_s3": "public",
    "bucket": "public",
    "checksum_algorithm": "public",
    "conditional_put": "public",
    "copy_if_not_exists": "public",
    "default_region": "public",
    "disable_tagging": "public",
    "disable_bulk_delete": "public",
    "endpoint": "public",
    "imdsv1_fallback": "public",
    "metadata_endpoint": "public",
    "region": "public",
    "request_payer": "public",
    "role_arn": "public",
    "role_session_name": "public",
    "s3_express": "public",
    "server_side_encryption": "public",
    "skip_signature": "public",
    "sse_bucket_key_enabled": "public",
    "sse_kms_key_id": "public",  # an id: IAM decides who may use the key
    "sts_endpoint": "public",
    "unsigned_payload": "public",
    "virtual_hosted_style_request": "public",
    # GCS (GCSConfig)
    "service_account": "secret",  # the path of a service-account key file
    "service_account_key": "secret",  # the key file's JSON itself
    "application_credentials": "secret",
    "bearer_token": "secret",
    "base_url": "public",
    # Azure (AzureConfig)
    "account_key": "secret",
    "client_secret": "secret",
    "sas_key": "secret",
    "token": "secret",
    "encryption_key": "secret",
    "federated_token_file": "secret",
    "fabric_session_token": "secret",
    "account_name": "public",
    "client_id": "public",
    "credential_type": "public",
    "tenant_id": "public",
    "authority_host": "public",
    "use_emulator": "public",
    "use_fabric_endpoint": "public",
    "msi_endpoint": "public",
    "object_id": "public",
    "msi_resource_id": "public",
    "use_azure_cli": "public",
    "container_name": "public",
    "fabric_token_service_url": "public",
    "fabric_workload_host": "public",
    "fabric_cluster_identifier": "public",
    # the HTTP client (ClientConfig)
    "proxy_url": "secret",  # http://user:password@proxy
    "default_headers": "secret",  # may carry an Authorization header
    "allow_http": "public",
    "allow_invalid_certificates": "public",
    "connect_timeout": "public",
    "default_content_type": "public",
    "http1_only": "public",
    "http2_keep_alive_interval": "public",
    "http2_keep_alive_timeout": "public",
    "http2_keep_alive_while_idle": "public",
    "http2_only": "public",
    "pool_idle_timeout": "public",
    "pool_max_idle_per_host": "public",
    "proxy_ca_certificate": "public",
    "proxy_excludes": "public",
    "root_certificate": "public",
    "randomize_addresses": "public",
    "read_timeout": "public",
    "timeout": "public",
    "user_agent": "public",
    # retries (chunkgraph's keys for obstore's RetryConfig)
    "retry_timeout": "public",
    "max_retries": "public",
}
# fmt: on

# The keys obstore takes as client_options (its ClientConfig), not store config.
CLIENT_KEYS = frozenset(
    {
        "allow_http", "allow_invalid_certificates", "connect_timeout", "default_content_type",
        "default_headers", "http1_only", "http2_keep_alive_interval", "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle", "http2_only", "pool_idle_timeout", "pool_max_idle_per_host",
        "proxy_url", "proxy_ca_certificate", "proxy_excludes", "root_certificate",
        "randomize_addresses", "read_timeout", "timeout", "user_agent",
    }
)  # fmt: skip

SECRET_KEYS = frozenset(k for k, kind in OPTION_KINDS.items() if kind == "secret")

# Other spellings obstore accepts for a canonical key (after the prefix is dropped).
_ALIASES = {
    "endpoint_url": "endpoint",
    "bucket_name": "bucket",
    "service_account_path": "service_account",
    "access_key": "account_key",
    "master_key": "account_key",
    "sas_token": "sas_key",
}
_PREFIXES = ("aws_", "google_", "azure_storage_", "azure_")

# Words that make a name not in the table secret too (a misspelling of a secret key).
_SECRET_WORDS = ("secret", "token", "password", "credential", "private", "key")


def canonical(name: str) -> str:
    """The table's spelling of option ``name`` (obstore accepts several).

    >>> canonical("AWS_SECRET_ACCESS_KEY"), canonical("google_service_account_path")
    ('secret_access_key', 'service_account')
    """
    name = name.lower()
    if name in OPTION_KINDS:
        return name
    for prefix in _PREFIXES:
        if name.startswith(prefix) and name[len(prefix) :]:
            name = name[len(prefix) :]
            break
    return _ALIASES.get(name, name)


def is_secret_key(name: str) -> bool:
    """Whether the value of option ``name`` is kept out of sight (see the module docstring)."""
    kind = OPTION_KINDS.get(canonical(name))
    if kind is not None:
        return kind == "secret"
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)
