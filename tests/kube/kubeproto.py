"""What the fakes of tests/kube/ share: message classes from the descriptor sets the build makes
of kube/proto/*.proto (build/gen/kube/NAME.desc), and a raw protobuf wire reader that checks a
message's field numbers and wire types against a table transcribed from the kubelet's own
api.proto files, so that a wrong field number in our .proto fails a test even though both
sides, built from the same .proto, would agree with each other."""
import os
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

GEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "gen", "kube")


def load(name, gen=GEN):
    """The message classes of NAME.desc, by full name ("v1beta1.RegisterRequest")."""
    fds = descriptor_pb2.FileDescriptorSet()
    with open(os.path.join(gen, name + ".desc"), "rb") as f:
        fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    classes = {}
    for fd in fds.file:
        fdesc = pool.FindFileByName(fd.name)
        for mname in fdesc.message_types_by_name:
            desc = fdesc.message_types_by_name[mname]
            if hasattr(message_factory, "GetMessageClass"):
                cls = message_factory.GetMessageClass(desc)
            else:
                cls = message_factory.MessageFactory(pool).GetPrototype(desc)
            classes[desc.full_name] = cls
    return classes


# Upstream's field numbers, transcribed by hand from k8s.io/kubelet (github.com/kubernetes/kubelet
# at commit 63b3249, v0.37.0-beta.0): pkg/apis/deviceplugin/v1beta1/api.proto and
# pkg/apis/podresources/v1/api.proto. NAME: {number: (field, kind)}, kind a scalar wire kind
# ("string", "bool", "varint") or the name of a message here. A map field is its entry message
# (key = 1, value = 2), as on the wire.
UPSTREAM = {
    "RegisterRequest": {1: ("version", "string"), 2: ("endpoint", "string"),
                        3: ("resource_name", "string"), 4: ("options", "DevicePluginOptions")},
    "DevicePluginOptions": {1: ("pre_start_required", "bool"),
                            2: ("get_preferred_allocation_available", "bool")},
    "ListAndWatchResponse": {1: ("devices", "Device")},
    "Device": {1: ("ID", "string"), 2: ("health", "string"), 3: ("topology", "TopologyInfo")},
    "TopologyInfo": {1: ("nodes", "NUMANode")},
    "NUMANode": {1: ("ID", "varint")},
    "PreferredAllocationResponse": {1: ("container_responses",
                                        "ContainerPreferredAllocationResponse")},
    "ContainerPreferredAllocationResponse": {1: ("deviceIDs", "string")},
    "AllocateResponse": {1: ("container_responses", "ContainerAllocateResponse")},
    "ContainerAllocateResponse": {1: ("envs", "StringEntry"), 2: ("mounts", "Mount"),
                                  3: ("devices", "DeviceSpec"), 4: ("annotations", "StringEntry"),
                                  5: ("cdi_devices", "CDIDevice")},
    "StringEntry": {1: ("key", "string"), 2: ("value", "string")},
    "Mount": {1: ("container_path", "string"), 2: ("host_path", "string"),
              3: ("read_only", "bool")},
    "DeviceSpec": {1: ("container_path", "string"), 2: ("host_path", "string"),
                   3: ("permissions", "string")},
    "CDIDevice": {1: ("name", "string")},
    "PreStartContainerResponse": {},
    "Empty": {},
}

WIRE_OF_KIND = {"string": 2, "bool": 0, "varint": 0}


def _varint(b, i):
    v = shift = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def wire_decode(b, mtype):
    """Decodes B as upstream's message MTYPE with the raw wire format: a dict of field name to a
    list of values (strings decoded, messages as dicts). Raises ValueError on a field number
    upstream's MTYPE does not have or a wire type that does not match its kind."""
    table = UPSTREAM[mtype]
    out = {}
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if num not in table:
            raise ValueError("%s: field number %d is not upstream's" % (mtype, num))
        name, kind = table[num]
        want = WIRE_OF_KIND.get(kind, 2)
        if wt != want:
            raise ValueError("%s.%s (field %d): wire type %d, upstream's is %d"
                             % (mtype, name, num, wt, want))
        if wt == 0:
            v, i = _varint(b, i)
            val = bool(v) if kind == "bool" else v
        else:
            n, i = _varint(b, i)
            raw = b[i:i + n]
            if len(raw) != n:
                raise ValueError("truncated field")
            i += n
            val = raw.decode() if kind == "string" else wire_decode(raw, kind)
        out.setdefault(name, []).append(val)
    return out


def log(*a):
    print(*a, file=sys.stderr, flush=True)
