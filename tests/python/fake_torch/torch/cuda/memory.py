"""Stand-in for torch.cuda.memory: a snapshot with the real pickle's shape."""


def _snapshot(device=None):
    frame = {"filename": "train.py", "line": 12, "name": "forward"}
    return {
        "segments": [{
            "device": 0, "address": 1 << 40, "total_size": 2 << 20, "allocated_size": 1 << 20,
            "active_size": 1 << 20, "requested_size": 1000000, "stream": 0,
            "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": [frame],
            "blocks": [
                {"address": 1 << 40, "size": 1 << 20, "requested_size": 1000000,
                 "state": "active_allocated", "frames": [frame]},
                {"address": (1 << 40) + (1 << 20), "size": 1 << 20, "requested_size": 0,
                 "state": "inactive", "frames": []},
            ],
        }],
        "device_traces": [[]],
        "allocator_settings": {"expandable_segments": False},
        "external_annotations": [],
    }
