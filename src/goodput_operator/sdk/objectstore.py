"""An S3 API client for checkpoints, on the standard library alone (workers run any image):
objects put from files, fetched to files, listed, deleted; requests signed with AWS
Signature Version 4, path-style (`ENDPOINT/BUCKET/KEY`), as every S3-compatible server
accepts.

Credentials and the endpoint come from the variables the AWS SDKs read, which a
TrainingJob's `checkpoint.credentialsSecret` gives every worker: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, optional AWS_SESSION_TOKEN, AWS_REGION (default us-east-1) and
AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (default: AWS's regional endpoint). One PUT per
object: a shard up to 5 GiB (S3's single-PUT limit; larger ones need multipart uploads,
which this client does not do: save them in parts).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import os
import ssl
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class ObjectStoreError(RuntimeError):
    """The object store refused a request or could not be reached."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status


def split_url(url: str) -> tuple[str, str]:
    """s3://BUCKET/PREFIX -> (BUCKET, PREFIX without slashes at its ends)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError(f"{url} is not an s3://bucket/prefix URL")
    return parts.netloc, parts.path.strip("/")


def is_remote(location: str | Path) -> bool:
    return str(location).startswith("s3://")


@dataclass(frozen=True)
class ObjectStore:
    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    session_token: str = ""
    timeout: float = 60.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ObjectStore:
        env = os.environ if env is None else env
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or \
            f"https://s3.{region}.amazonaws.com"
        access, secret = env.get("AWS_ACCESS_KEY_ID", ""), env.get("AWS_SECRET_ACCESS_KEY", "")
        if not access or not secret:
            raise ObjectStoreError(None, "no object store credentials: set "
                                         "spec.checkpoint.credentialsSecret on the TrainingJob "
                                         "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
        return cls(endpoint.rstrip("/"), access, secret, region,
                   env.get("AWS_SESSION_TOKEN", ""))

    @property
    def where(self) -> str:
        return "the store"

    # ---- objects -------------------------------------------------------------
    def put_file(self, bucket: str, key: str, path: Path) -> None:
        sha = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(CHUNK):
                sha.update(chunk)
        with path.open("rb") as handle:
            self._request("PUT", bucket, key, body=handle, length=path.stat().st_size,
                          payload_hash=sha.hexdigest())

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        self._request("PUT", bucket, key, body=data, length=len(data),
                      payload_hash=hashlib.sha256(data).hexdigest())

    def get_bytes(self, bucket: str, key: str) -> bytes:
        return self._request("GET", bucket, key)

    def get_file(self, bucket: str, key: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            self._request("GET", bucket, key, sink=out)

    def exists(self, bucket: str, key: str) -> bool:
        try:
            self._request("HEAD", bucket, key)
        except ObjectStoreError as err:
            if err.status == 404:
                return False
            raise
        return True

    def delete(self, bucket: str, key: str) -> None:
        self._request("DELETE", bucket, key)

    def keys(self, bucket: str, prefix: str) -> Iterator[str]:
        """Every key under PREFIX (ListObjectsV2, page by page)."""
        token = ""
        while True:
            query = {"list-type": "2", "prefix": prefix, **(
                {"continuation-token": token} if token else {})}
            root = ET.fromstring(self._request("GET", bucket, "", query=query))
            for item in root.iter(f"{NS}Contents"):
                key = item.findtext(f"{NS}Key")
                if key:
                    yield key
            token = root.findtext(f"{NS}NextContinuationToken") or ""
            if root.findtext(f"{NS}IsTruncated") != "true" or not token:
                return

    def create_bucket(self, bucket: str) -> None:
        """BUCKET, unless it exists already."""
        try:
            self._request("PUT", bucket, "", body=b"", length=0)
        except ObjectStoreError as err:
            if err.status != 409:  # BucketAlreadyOwnedByYou / Exists
                raise

    # ---- the wire --------------------------------------------------------------
    def _request(self, method: str, bucket: str, key: str, body: object = None,
                 length: int | None = None, payload_hash: str | None = None,
                 query: Mapping[str, str] | None = None, sink: object = None) -> bytes:
        parts = urllib.parse.urlsplit(self.endpoint)
        path = f"{parts.path.rstrip('/')}/{bucket}" + (f"/{urllib.parse.quote(key)}"
                                                       if key else "")
        canonical_query = "&".join(
            f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
            for k, v in sorted((query or {}).items()))
        headers = self._signed(method, parts.netloc, path, canonical_query,
                               payload_hash or hashlib.sha256(b"").hexdigest())
        if length is not None:
            headers["Content-Length"] = str(length)
        connection = (http.client.HTTPSConnection(parts.netloc, timeout=self.timeout,
                                                  context=ssl.create_default_context())
                      if parts.scheme == "https" else
                      http.client.HTTPConnection(parts.netloc, timeout=self.timeout))
        try:
            connection.request(method, path + (f"?{canonical_query}" if canonical_query
                                               else ""), body=body,  # type: ignore[arg-type]
                               headers=headers)
            response = connection.getresponse()
            if response.status >= 300:
                detail = response.read().decode(errors="replace")[:300]
                raise ObjectStoreError(response.status, f"{method} s3://{bucket}/{key}: "
                                                        f"{response.status} {detail}")
            if sink is not None:
                while chunk := response.read(CHUNK):
                    sink.write(chunk)  # type: ignore[attr-defined]
                return b""
            return response.read()
        except OSError as err:
            raise ObjectStoreError(None, f"cannot reach the object store at "
                                         f"{self.endpoint}: {err}") from None
        finally:
            connection.close()

    def _signed(self, method: str, host: str, path: str, query: str, payload_hash: str
                ) -> dict[str, str]:
        """Signature Version 4 headers for one request."""
        stamp = "{:04d}{:02d}{:02d}T{:02d}{:02d}{:02d}Z".format(*time.gmtime()[:6])
        day = stamp[:8]
        headers = {"host": host, "x-amz-content-sha256": payload_hash, "x-amz-date": stamp}
        if self.session_token:
            headers["x-amz-security-token"] = self.session_token
        signed = ";".join(sorted(headers))
        canonical = "\n".join([method, urllib.parse.quote(path, safe="/-_.~%"), query,
                               *(f"{k}:{headers[k]}" for k in sorted(headers)), "", signed,
                               payload_hash])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope,
                             hashlib.sha256(canonical.encode()).hexdigest()])
        key = f"AWS4{self.secret_key}".encode()
        for part in (day, self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                                    f"SignedHeaders={signed}, Signature={signature}")
        del headers["host"]  # http.client sends it
        return headers
