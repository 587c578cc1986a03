"""``GET /health``: whether the service runs, on which kind of database, its schema, and whether its secrets
are sealed (public: it names no host, user or file)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from dpstream.service.dependencies import StorageDep

__all__ = ["router"]

router = APIRouter()


@router.get("/health")
def health(storage: StorageDep) -> dict[str, Any]:
    return {"status": "ok", "database": storage.describe().split(":")[0],
            "schema_version": storage.schema_version(), "secrets_encrypted": storage.encrypted}
