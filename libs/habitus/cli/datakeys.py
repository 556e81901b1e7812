"""`habitus datakeys`: the users' data keys and the key-encryption key (KEK) that wraps them,
on the machine that holds the key store (HABITUS_KEYSTORE_DIR). Nothing stops while they run:
every process reads the KEK ring again when it meets a key wrapped by a KEK it does not know.

Rotating the KEK, with the ring file (HABITUS_KEK unset):

    habitus datakeys rotate-kek     # a new current KEK; the old one still unwraps
    habitus datakeys rewrap         # every stored key wrapped again with the current KEK
    habitus datakeys drop-kek <id>  # the old KEK removed, once it wraps nothing

With HABITUS_KEK the ring is the variable, rolled out in three steps so no pod meets a KEK it
lacks: deploy `old:<b64>,new:<b64>`, then `new:<b64>,old:<b64>`, run `rewrap`, then deploy
`new:<b64>` alone. `rotate --tenant T --user U` gives one user a new data key (the old
one still opens what it sealed); `status` shows the KEKs and how many keys each wraps.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from habitus.cli.gateway import fail
from habitus.cli.output import console, echo_json

if TYPE_CHECKING:
    from habitus.crypto.keyring import Keyring

datakeys_app = typer.Typer(
    help="Users' data keys (crypto-shredding) and the key-encryption key that wraps them.",
    no_args_is_help=True)


def _context() -> tuple[Keyring, Path | None]:
    from habitus.config import get_settings
    from habitus.crypto.kek import KekError
    from habitus.crypto.setup import kek_path, keyring_from

    settings = get_settings()
    try:
        keyring = keyring_from(settings)
    except KekError as exc:
        raise fail(str(exc)) from None
    if keyring is None:
        raise fail("event encryption is off here (HABITUS_ENCRYPT_EVENTS=false): no data keys")
    return keyring, (None if settings.kek else kek_path(settings))


@datakeys_app.command("status")
def status(as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False
           ) -> None:
    """The KEKs of the ring, the current one, and how many stored keys each wraps."""
    keyring, ring_file = _context()
    in_use = keyring.kek_ids_in_use()
    found = {"current": keyring.kek.current, "keks": sorted(keyring.kek.keys),
             "keys_wrapped_by": in_use, "ring": str(ring_file) if ring_file else "HABITUS_KEK"}
    if as_json:
        echo_json(found)
        return
    console.print(f"KEK ring: {found['ring']}; current {keyring.kek.current}")
    for kek_id in sorted(keyring.kek.keys):
        console.print(f"  {kek_id}: wraps {in_use.get(kek_id, 0)} key(s)")
    unknown = sorted(set(in_use) - set(keyring.kek.keys))
    if unknown:
        console.print(f"  not in the ring, yet wrapping keys: {', '.join(unknown)}",
                      style="red")


def _ring_file() -> tuple[Keyring, Path]:
    keyring, ring_file = _context()
    if ring_file is None:
        raise fail("HABITUS_KEK is set: the ring is that variable. Deploy `old:<base64>,"
                   "new:<base64>`, then `new:<base64>,old:<base64>`, run `habitus datakeys "
                   "rewrap`, then deploy the new one alone")
    return keyring, ring_file


@datakeys_app.command("rotate-kek")
def rotate_kek() -> None:
    """Make a fresh KEK current in the ring file; the earlier ones still unwrap."""
    from habitus.crypto.kek import save_ring

    keyring, ring_file = _ring_file()
    rotated = keyring.kek.rotated()
    save_ring(rotated, ring_file)
    console.print(f"current KEK: {rotated.current} (kept: {', '.join(sorted(keyring.kek.keys))}"
                  f"); now run `habitus datakeys rewrap`")


@datakeys_app.command("rewrap")
def rewrap() -> None:
    """Wrap every stored data key again with the ring's current KEK."""
    keyring, _ = _context()
    count = keyring.rewrap_all(keyring.kek)
    console.print(f"rewrapped the keys of {count} user(s) with {keyring.kek.current}")


@datakeys_app.command("drop-kek")
def drop_kek(kek_id: Annotated[str, typer.Argument(help="the KEK to remove from the ring")]
             ) -> None:
    """Remove a KEK from the ring file, refused while a stored key is still wrapped by it."""
    from habitus.crypto.kek import KekError, save_ring

    keyring, ring_file = _ring_file()
    if kek_id not in keyring.kek.keys:
        raise fail(f"{kek_id}: not in the ring ({', '.join(sorted(keyring.kek.keys))})")
    if kek_id == keyring.kek.current:
        raise fail(f"{kek_id} is the current KEK and cannot be dropped; rotate first")
    wrapping = keyring.kek_ids_in_use().get(kek_id, 0)
    if wrapping:
        raise fail(f"{kek_id} still wraps {wrapping} key(s): run `habitus datakeys rewrap` "
                   "first")
    try:
        save_ring(keyring.kek.without(kek_id), ring_file)
    except KekError as exc:
        raise fail(str(exc)) from None
    console.print(f"dropped {kek_id}")


@datakeys_app.command("rotate")
def rotate(tenant: Annotated[str, typer.Option(help="the user's tenant")],
           user: Annotated[str, typer.Option(help="the user")]) -> None:
    """Give one user a new data key for what is sealed from now on."""
    keyring, _ = _context()
    console.print(f"{tenant}/{user}: new data key {keyring.rotate(tenant, user)}")
