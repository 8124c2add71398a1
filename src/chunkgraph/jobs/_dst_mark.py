"""A job's mark in the volumes it makes, and what a resume checks of it.

A job (label, transfer, downsample) makes new volumes. What makes one job the same job
again is its source's place and its settings (label's threshold, transfer's chunks and
dtype, downsample's factor and method, ...): the job's mark, JSON text kept in the
volume's chunkgraph attributes when the job makes it (``volume.create(made_by=...)``).
Without ``resume`` a volume already there is refused (``refuse_existing``): the job
would write over it. With ``resume`` the job continues into it only when it carries the
same mark (``check_mark``):

* no mark, or another job's: the volume was not made by this job (another tool's, or
  one made by hand that happens to have the same shape and dtype): refused;
* another source's mark: refused;
* the same source, other settings: refused, naming the settings it was started with and
  this call's, and both ways on.

The source's place in a mark is what it holds, not how it is reached: a directory on
disk resolved (symlinks and relative spellings agree), an object store's scheme, bucket
and key. An endpoint is no part of it: the same server is named by the environment or by
storage options, with or without a trailing slash, as localhost or 127.0.0.1, and no
spelling of it can be told from another server's without asking the network. Nothing is
lost by leaving it out: which chunks count as done is the flow's id to decide, and that
id still names an endpoint given in storage options, so a resume whose options name the
endpoint otherwise (or another server) computes its chunks again rather than keep any.
A refusal for another source shows both places.

Each refusal names the volume and writes nothing to it. A format whose metadata has no
room for the mark (precomputed) keeps none: a resume there is checked by shape and dtype
only (``volume.create``'s ``exist_ok``), and refused when the volume has scales besides
the one the job writes (another tool's pyramid: a resume would leave them stale).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import numpy as np

from chunkgraph import volume
from chunkgraph._errors import ConfigError, VolumeNotFoundError
from chunkgraph.jobs._words import JobRefusal, Settings
from chunkgraph.volume import Volume, is_object_url, path_to_open, split_format, split_url

# Formats whose metadata keeps no mark (create's made_by): resumed by shape and dtype.
UNMARKED_FORMATS = ("precomputed",)


def job_mark(job: str, source: Volume, settings: Mapping[str, Any]) -> str:
    """The mark of ``job`` over ``source`` with ``settings`` (plain values, tuples and
    numpy scalars and dtypes among them)."""
    found = {"source": source_place(source), **settings}
    # In the order given: a refusal names changed settings in it.
    return json.dumps({job: found}, default=_plain)


def source_place(source: Volume) -> str:
    """What ``source`` holds, as a mark names it (module doc): its location's identity
    without the endpoint."""
    return dataclasses.replace(source.location, where=()).identity().removeprefix("disk:")


def _plain(value: Any) -> Any:
    """A value JSON has no word for, as plain data (numpy's); else its text."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.dtype):
        return value.name
    return str(value)


def existing_at(dst: str | os.PathLike[str]) -> tuple[bool, Volume | None]:
    """(whether something is at ``dst``, the volume there if it opens as one). What a job
    makes where nothing was, it may remove again; something there that does not open as
    a volume is left to ``volume.create`` to name, and none of it is ever removed."""
    try:
        return True, volume.open(dst)
    except VolumeNotFoundError:
        return False, None
    except (ConfigError, OSError):
        return True, None


@dataclasses.dataclass(frozen=True)
class Maker:
    """How a job speaks of what it makes, in its refusals (templates of ``_words``).

    Attributes:
        job: The job's name, also the mark's key: "label", "transfer", "downsample".
        noun: What it makes, after "a label that made its": "dst", "levels".
        started: The same, after "the label that started": "dst", "them".
        makes: What it makes, after "label makes": "a new volume", "new levels".
        new_path: The way out that leaves the volume alone: "a new path".
        new_dst: The same, in a resume's refusal: "a new dst".
    """

    job: str
    noun: str = "dst"
    started: str = "dst"
    makes: str = "a new volume"
    new_path: str = "a new path"
    new_dst: str = "a new dst"


def refuse_existing(
    maker: Maker, what: str, dst: str | os.PathLike[str], existing: Volume
) -> NoReturn:
    """The refusal of a volume already at ``dst`` (``what``: "dst", "level 1") without
    ``resume``: the job would write over it."""
    raise JobRefusal(
        "{what} {dst!r} already exists (a {dtype} volume of shape {shape}), and {job} makes "
        f"{maker.makes}: give {maker.new_path}, or {{remove}}; to continue an interrupted "
        "{job} into it, pass {resume}",
        field="dst", what=what, dst=os.fspath(dst), dtype=existing.dtype,
        shape=existing.shape, job=maker.job,
    )  # fmt: skip


def refuse_bucket_root(maker: Maker, dst: str | os.PathLike[str]) -> None:
    """A dst at a bucket's root is refused: the job keeps its flow state beside dst."""
    _, place = split_format(os.fspath(dst))
    if is_object_url(place) and not split_url(place)[2]:
        raise ConfigError(
            f"dst {os.fspath(dst)!r} is a bucket's root, and {maker.job} keeps its state "
            f"beside dst: put the volume under a prefix, e.g. {place.rstrip('/')}/NAME.zarr",
            field="dst",
        )


def check_mark(
    maker: Maker,
    what: str,
    existing: Volume | None,
    mark: str,
    shown: Callable[[str, Any], str],
) -> None:
    """A volume a resume continues into (``what``: "dst", "level 1") carries this job's
    ``mark`` (module doc); ``shown(name, value)``: a setting in the job's words."""
    if existing is None:
        return
    if existing.format.name in UNMARKED_FORMATS:
        _refuse_other_scales(maker, what, existing)
        return
    job = maker.job
    found, now = _settings(job, existing.made_by), _settings(job, mark) or {}
    values = {"what": what, "dst": existing.path, "job": job}
    if found is None or found.keys() != now.keys():
        raise JobRefusal(
            "{what} {dst!r} (a {dtype} volume of shape {shape}) was not made by {job}, and "
            f"{{resume}} continues only a {{job}} that made its {maker.noun}: nothing was "
            f"written to it. Give {maker.new_dst}, or {{remove}} and {{job}} again",
            field="dst", dtype=existing.dtype, shape=existing.shape, **values,
        )  # fmt: skip
    if found["source"] != now["source"]:
        raise JobRefusal(
            "{what} {dst!r} was made by a {job} of another source ({was}), and this one's is "
            "{now}: {resume} continues only that {job}, and nothing was written to it. Give "
            f"{maker.new_dst}, or {{remove}} and {{job}} again",
            field="dst", was=found["source"], now=now["source"], **values,
        )  # fmt: skip
    changed = [k for k in now if k != "source" and found[k] != now[k]]
    if changed:
        was = Settings(tuple((k, found[k]) for k in changed), shown)
        asked = Settings(tuple((k, now[k]) for k in changed), shown)
        raise JobRefusal(
            "{what} {dst!r} was started by a {job} with {was}, and this one has {asked}: "
            f"{{resume}} continues only the {{job}} that started {maker.started}, and "
            "nothing was written to it. To continue that {job}, give {was} again; to "
            f"{{job}} with {{asked}}, give {maker.new_dst}, or {{remove}}",
            field=changed[0], was=was, asked=asked, **values,
        )  # fmt: skip


def image_levels(level: Volume) -> list[Volume]:
    """Every level of the multiscale image ``level`` is one of, by index (``[level]`` for a
    volume of a plain format)."""
    reach = level.level_of
    if reach is None:
        return [level]
    root = path_to_open(reach[0], level.backend)
    found: list[Volume] = []
    while True:
        try:
            found.append(volume.open(root, scale=len(found), storage_options=level.storage_options))
        except ConfigError:  # past the last one
            return found


def _refuse_other_scales(maker: Maker, what: str, existing: Volume) -> None:
    """An unmarked volume a job resumes into has no scales besides the one it writes."""
    count = len(image_levels(existing))
    if count > 1:
        reach = existing.level_of  # named by its root, as given, not by its first scale
        others = "scale 1" if count == 2 else f"scales 1 to {count - 1}"
        raise JobRefusal(
            "{what} {dst!r} is a {format} volume with {count} scales, and {job} writes only "
            "one: a resume would leave {others} stale; nothing was written to it. If "
            "the {job} into it had finished, there is nothing to resume; else give "
            f"{maker.new_dst}, or {{remove}} and {{job}} again",
            field="dst", what=what, dst=reach[0] if reach else existing.path,
            format=existing.format.name,
            count=count, others=others, job=maker.job,
        )  # fmt: skip


def _settings(job: str, mark: str) -> dict[str, Any] | None:
    """The settings (the source's place among them) a mark of ``job`` holds; None for
    text that is not one."""
    try:
        found = json.loads(mark)
    except ValueError:
        return None
    settings = found.get(job) if isinstance(found, dict) else None
    return settings if isinstance(settings, dict) and "source" in settings else None


def setting(name: str, value: Any) -> str:
    """One setting as transfer and downsample name it: "chunks 64x64x32", "method 'max'",
    "dtype uint8", "no shards"."""
    if value is None:
        return f"no {name}"
    if isinstance(value, list) and all(isinstance(v, list) for v in value):  # a box
        return f"{name} " + ":".join(",".join(map(str, v)) for v in value)
    if isinstance(value, list):
        return f"{name} " + "x".join(map(str, value))
    return f"{name} {value}" if name == "dtype" else f"{name} {value!r}"
