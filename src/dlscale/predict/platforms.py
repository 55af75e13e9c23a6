"""Named machines (`--platform`) from references/platforms.json: every figure cites its source.

A platform's network is derived from its figures and NCCL's own constants, nothing else:

    intra (GB/s per device) = NVLink links per device x NCCL's GB/s per link
                              (AC922: NCCL's POWER9 inter-socket figure, which a 4-GPU ring crosses;
                              PCIe: lanes x NCCL's GB/s per lane of the generation, and no more than
                              NCCL's figure for the link between two sockets where the ring crosses it)
    inter (GB/s per node)   = NICs x line rate (Gbit/s) / 8 x the transport's fraction of it: NCCL's 0.96 over
                              InfiniBand verbs (12 GB/s per 100 Gbit/s), which RoCE runs too; 0.5 over TCP
                              sockets, the median of published nccl-tests sweeps between nodes of several GPUs
    latency                 = NCCL's base latency per call and per-step latencies (NVLink or PCI; the network:
                              14 us over InfiniBand verbs, 33.6 us over TCP sockets from a published 2-node sweep)

Each platform also says what kind of machine it is (`dedicated`: nodes of one job on an RDMA fabric;
`cloud-tcp`: virtual instances on TCP over Ethernet), which chooses the default spread of step times
(predict/spread.py), and its fabric's transport (ib, roce, tcp).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from importlib import resources

from dlscale.errors import ConfigError, shown
from dlscale.predict.network import Level, Network

TRANSPORTS = ("ib", "roce", "tcp")
"""InfiniBand, RDMA over Converged Ethernet, TCP sockets (NCCL's socket transport)."""
KINDS = ("dedicated", "cloud-tcp")
"""Nodes of one job on an RDMA fabric; virtual instances on TCP over Ethernet: each its default spread of step
times (predict/spread.py), which an unknown kind would silently leave out."""


@dataclass(frozen=True)
class Platform:
    id: str
    label: str
    device: str
    figures: dict
    """name -> {"value", "source", ...} as the file has them."""
    constants: dict
    notes: tuple[str, ...]
    intra_kind: str
    """nvlink, p9_xbus or pcie: what joins the devices of a node."""
    kind: str
    """One of KINDS: the default spread of step times (predict/spread.py)."""
    transport: str
    """One of TRANSPORTS: the fabric between nodes."""
    machine_class: str
    """The class of machine the validation reports errors per: its nodes and their fabric."""

    def __post_init__(self) -> None:
        given = (("kind", KINDS, "its entry in references/platforms.json"),
                 ("transport", TRANSPORTS, "its entry in references/platforms.json, or a reference series' "
                                           "transport field"))
        for name, choices, where in given:
            if getattr(self, name) not in choices:
                raise ConfigError(f"platform {self.id}: {name}={shown(getattr(self, name))}; choose one of "
                                  f"{', '.join(choices)} in {where}")

    def value(self, name: str):
        return self.figures[name]["value"]

    @property
    def intra_gbs(self) -> float:
        if self.intra_kind == "p9_xbus":
            return self.constants["p9_xbus_gbs"]["value"]
        if self.intra_kind == "pcie":
            link = self.value("pcie_lanes") * self.constants["pcie_gbs_per_lane"]["value"][str(self.value("pcie_gen"))]
            sockets = self.figures.get("socket_link", {}).get("value")
            return min(link, self.constants["socket_gbs"]["value"][sockets]) if sockets else link
        per_link = self.constants["nvlink_gbs_per_link"]["value"][self.device]
        return self.value("nvlink_links_per_device") * per_link

    @property
    def intra_hop_us(self) -> float:
        return self.constants["pci_hop_us" if self.intra_kind == "pcie" else "nvlink_hop_us"]["value"]

    def transport_figure(self, name: str) -> float:
        """`net_efficiency` or `net_hop_us` of the fabric's transport: TCP sockets' own (tcp_...), else InfiniBand
        verbs', which RoCE runs (roce_transport)."""
        runs = self.constants["roce_transport"]["value"] if self.transport == "roce" else self.transport
        return self.constants[f"tcp_{name}" if runs == "tcp" else name]["value"]

    @property
    def inter_gbs(self) -> float:
        return self.value("nics_per_node") * self.value("nic_gbps") / 8 * self.transport_figure("net_efficiency")

    def network(self) -> Network:
        c = self.constants
        return Network(
            name=self.id, devices_per_node=self.value("devices_per_node"),
            intra=Level(self.intra_gbs, self.intra_hop_us),
            inter=Level(self.inter_gbs, self.transport_figure("net_hop_us")),
            base_us=c["base_latency_us"]["value"], nics_per_node=self.value("nics_per_node"),
            source=f"platform {self.id} (references/platforms.json): {self.label}",
        )

    def with_fabric(self, nics: int | None, nic_gbps: float | None, transport: str | None) -> Platform:
        """The same nodes on another fabric (--nics, --nic-gbps, --transport): an Ethernet or RoCE cluster of
        DGX-like nodes, say. The figures given are said to be given."""
        figures = dict(self.figures)
        given = []
        for name, value in (("nics_per_node", nics), ("nic_gbps", nic_gbps)):
            if value is not None:
                figures[name] = {"value": value, "source": [], "note": "given on the command line"}
                given.append(f"{name} {value:g}")
        if transport is not None:
            given.append(f"transport {transport}")
        label = self.label + (f"; fabric given: {', '.join(given)}" if given else "")
        return dataclasses.replace(self, label=label, figures=figures, transport=transport or self.transport)

    def describe(self) -> str:
        cores = self.value("cpu_cores_per_node")
        return (f"{self.id}: {self.label}; {self.value('devices_per_node')} {self.device} per node, "
                f"{self.intra_gbs:.1f} GB/s per device inside the node ({self.intra_kind}), {self.inter_gbs:.1f} GB/s "
                f"per node between nodes ({self.value('nics_per_node')} x {self.value('nic_gbps')} Gbit/s "
                f"{self.transport}), {'?' if cores is None else cores} CPU cores per node, {self.kind}")


def _load() -> dict:
    return json.loads((resources.files("dlscale") / "references" / "platforms.json").read_text())


def platforms() -> dict[str, Platform]:
    data = _load()
    known = {s["id"] for s in data["sources"]}
    out = {}
    for raw in data["platforms"]:
        for name, figure in raw["figures"].items():
            missing = [s for s in figure["source"] if s not in known]
            if missing or (figure["value"] is not None and not figure["source"]):
                raise ConfigError(f"platforms.json: {raw['id']}.{name} cites no known source ({missing})")
        out[raw["id"]] = Platform(raw["id"], raw["label"], raw["device"], raw["figures"], data["constants"],
                                  tuple(raw.get("notes", ())), raw["intra"], raw["kind"], raw["transport"],
                                  raw["class"])
    return out


def sources() -> dict[str, dict]:
    return {s["id"]: s for s in _load()["sources"]}


def platform(name: str) -> Platform:
    known = platforms()
    if name not in known:
        raise ConfigError(f"unknown --platform {name!r}; choose one of {', '.join(known)}")
    return known[name]
