/*
 * fake_amdsmi.c: a stand-in libamd_smi.so for torchtop's tests. It exports the amd-smi 26
 * (ROCm 7) functions torchtop calls, with the structure layouts of amdsmi.h, and answers them
 * from a scenario file named by TORCHTOP_FAKE_AMDSMI_SCENARIO, read by amdsmi_init.
 *
 * Scenario lines (anything else, and '#' comments, are ignored):
 *   version MAJOR MINOR RELEASE      what amdsmi_get_lib_version reports (default 26 1 0)
 *   init STATUS                      what amdsmi_init returns (default 0, success)
 *   gpu BDF CE UE ENERGY RESOLUTION  a GPU at PCI address BDF ("0000:0c:00.0"): correctable
 *                                    and uncorrectable ECC counts, the energy counter and its
 *                                    resolution in microjoules
 *   process BDF PID VRAM GFX_NS      a process on that GPU, its VRAM in bytes and engine ns
 *
 * Build: cc -shared -fPIC -o libamd_smi.so fake_amdsmi.c (tests/common/fake_amdsmi.rs does).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint32_t amdsmi_status_t;
typedef void *amdsmi_socket_handle;
typedef void *amdsmi_processor_handle;

enum { SUCCESS = 0, INVAL = 1, NOT_SUPPORTED = 2, NOT_INIT = 32, OUT_OF_RESOURCES = 15 };
#define MAX_GPUS 16
#define MAX_PROCS 64

typedef struct {
    uint32_t major;
    uint32_t minor;
    uint32_t release;
    const char *build;
} amdsmi_version_t;

typedef struct {
    uint64_t correctable_count;
    uint64_t uncorrectable_count;
    uint64_t deferred_count;
    uint64_t reserved[5];
} amdsmi_error_count_t;

typedef struct {
    char name[256];
    uint32_t pid;
    uint64_t mem;
    struct {
        uint64_t gfx;
        uint64_t enc;
        uint32_t reserved[12];
    } engine_usage;
    struct {
        uint64_t gtt_mem;
        uint64_t cpu_mem;
        uint64_t vram_mem;
        uint32_t reserved[10];
    } memory_usage;
    char container_name[256];
    uint32_t cu_occupancy;
    uint32_t evicted_time;
    uint32_t reserved[10];
} amdsmi_proc_info_t;

_Static_assert(sizeof(amdsmi_proc_info_t) == 704, "amd-smi 26 layout");

struct proc { uint32_t pid; uint64_t vram, gfx_ns; };
struct gpu {
    uint64_t bdf;
    uint64_t ce, ue, energy;
    float resolution;
    int nprocs;
    struct proc procs[MAX_PROCS];
};

static struct gpu gpus[MAX_GPUS];
static int ngpus;
static int initialised;
static uint32_t version[3] = {26, 1, 0};
static const char socket_token = 's';

static int parse_bdf(const char *text, uint64_t *bdf) {
    unsigned domain, bus, dev, fn;
    if (sscanf(text, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return 0;
    *bdf = ((uint64_t)domain << 16) | ((uint64_t)(bus & 0xff) << 8) | ((dev & 0x1f) << 3) | (fn & 7);
    return 1;
}

static struct gpu *gpu_at(uint64_t bdf) {
    for (int i = 0; i < ngpus; i++)
        if (gpus[i].bdf == bdf) return &gpus[i];
    return NULL;
}

/* Reads the scenario; returns the status amdsmi_init is to give. */
static amdsmi_status_t load_scenario(void) {
    const char *path = getenv("TORCHTOP_FAKE_AMDSMI_SCENARIO");
    amdsmi_status_t init_status = SUCCESS;
    ngpus = 0;
    if (!path) return init_status;
    FILE *file = fopen(path, "r");
    if (!file) return init_status;
    char line[512], bdf_text[64];
    while (fgets(line, sizeof line, file)) {
        unsigned a, b, c;
        unsigned long long ce, ue, energy, vram, ns;
        unsigned pid;
        float resolution;
        uint64_t bdf;
        if (sscanf(line, "version %u %u %u", &a, &b, &c) == 3) {
            version[0] = a; version[1] = b; version[2] = c;
        } else if (sscanf(line, "init %u", &a) == 1) {
            init_status = a;
        } else if (sscanf(line, "gpu %63s %llu %llu %llu %f", bdf_text, &ce, &ue, &energy,
                          &resolution) == 5 && parse_bdf(bdf_text, &bdf) && ngpus < MAX_GPUS) {
            struct gpu *g = &gpus[ngpus++];
            memset(g, 0, sizeof *g);
            g->bdf = bdf; g->ce = ce; g->ue = ue; g->energy = energy; g->resolution = resolution;
        } else if (sscanf(line, "process %63s %u %llu %llu", bdf_text, &pid, &vram, &ns) == 4
                   && parse_bdf(bdf_text, &bdf)) {
            struct gpu *g = gpu_at(bdf);
            if (g && g->nprocs < MAX_PROCS) {
                struct proc *p = &g->procs[g->nprocs++];
                p->pid = pid; p->vram = vram; p->gfx_ns = ns;
            }
        }
    }
    fclose(file);
    return init_status;
}

static struct gpu *gpu_of(amdsmi_processor_handle handle) {
    struct gpu *g = (struct gpu *)handle;
    if (!initialised || g < gpus || g >= gpus + ngpus) return NULL;
    return g;
}

amdsmi_status_t amdsmi_init(uint64_t flags) {
    (void)flags;
    amdsmi_status_t status = load_scenario();
    initialised = status == SUCCESS;
    return status;
}

amdsmi_status_t amdsmi_shut_down(void) {
    initialised = 0;
    return SUCCESS;
}

amdsmi_status_t amdsmi_get_lib_version(amdsmi_version_t *out) {
    if (!initialised) return NOT_INIT;
    if (!out) return INVAL;
    out->major = version[0];
    out->minor = version[1];
    out->release = version[2];
    out->build = "fake";
    return SUCCESS;
}

amdsmi_status_t amdsmi_get_socket_handles(uint32_t *count, amdsmi_socket_handle *handles) {
    if (!initialised) return NOT_INIT;
    if (!count) return INVAL;
    if (handles && *count >= 1) handles[0] = (void *)&socket_token;
    *count = 1;
    return SUCCESS;
}

amdsmi_status_t amdsmi_get_processor_handles(amdsmi_socket_handle socket, uint32_t *count,
                                             amdsmi_processor_handle *handles) {
    if (!initialised) return NOT_INIT;
    if (!count || socket != (void *)&socket_token) return INVAL;
    uint32_t n = 0;
    for (int i = 0; i < ngpus && handles && n < *count; i++) handles[n++] = &gpus[i];
    *count = handles ? n : (uint32_t)ngpus;
    return SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_device_bdf(amdsmi_processor_handle handle, uint64_t *bdf) {
    struct gpu *g = gpu_of(handle);
    if (!g || !bdf) return INVAL;
    *bdf = g->bdf;
    return SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_total_ecc_count(amdsmi_processor_handle handle,
                                               amdsmi_error_count_t *counts) {
    struct gpu *g = gpu_of(handle);
    if (!g || !counts) return INVAL;
    memset(counts, 0, sizeof *counts);
    counts->correctable_count = g->ce;
    counts->uncorrectable_count = g->ue;
    return SUCCESS;
}

amdsmi_status_t amdsmi_get_energy_count(amdsmi_processor_handle handle, uint64_t *energy,
                                        float *resolution, uint64_t *timestamp) {
    struct gpu *g = gpu_of(handle);
    if (!g || !energy || !resolution || !timestamp) return INVAL;
    *energy = g->energy;
    *resolution = g->resolution;
    *timestamp = 0;
    return SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_process_list(amdsmi_processor_handle handle,
                                            uint32_t *max_processes, amdsmi_proc_info_t *list) {
    struct gpu *g = gpu_of(handle);
    if (!g || !max_processes) return INVAL;
    uint32_t room = list ? *max_processes : 0;
    uint32_t n = 0;
    for (int i = 0; i < g->nprocs && n < room; i++, n++) {
        memset(&list[n], 0, sizeof list[n]);
        snprintf(list[n].name, sizeof list[n].name, "python3");
        list[n].pid = g->procs[i].pid;
        list[n].mem = g->procs[i].vram;
        list[n].memory_usage.vram_mem = g->procs[i].vram;
        list[n].engine_usage.gfx = g->procs[i].gfx_ns;
    }
    *max_processes = (uint32_t)g->nprocs;
    return (uint32_t)g->nprocs > room ? OUT_OF_RESOURCES : SUCCESS;
}
