// CUDA's own occupancy calculator (cuda_occupancy.h, shipped with the
// toolkit): for each line of stdin
//   major minor threads_per_sm shared_per_sm shared_optin reserved  block regs static_shared dynamic barriers
// print the resident blocks per SM and the limiting factors' bits.
#include <cstdio>
#include <cuda_occupancy.h>

int main() {
    int major, minor, threads_sm, block, regs, barriers;
    size_t shared_sm, optin, reserved, shared, dynamic;
    while (std::scanf("%d %d %d %zu %zu %zu %d %d %zu %zu %d", &major, &minor, &threads_sm, &shared_sm, &optin,
                      &reserved, &block, &regs, &shared, &dynamic, &barriers) == 11) {
        cudaOccDeviceProp props;
        props.computeMajor = major;
        props.computeMinor = minor;
        props.maxThreadsPerBlock = 1024;
        props.maxThreadsPerMultiprocessor = threads_sm;
        props.regsPerBlock = 65536;
        props.regsPerMultiprocessor = 65536;
        props.warpSize = 32;
        props.sharedMemPerBlock = 48 * 1024;
        props.sharedMemPerMultiprocessor = shared_sm;
        props.numSms = 1;
        props.sharedMemPerBlockOptin = optin;
        props.reservedSharedMemPerBlock = reserved;
        cudaOccFuncAttributes attributes;
        attributes.maxThreadsPerBlock = 1024;
        attributes.numRegs = regs;
        attributes.sharedSizeBytes = shared;
        attributes.partitionedGCConfig = PARTITIONED_GC_OFF;
        attributes.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
        attributes.maxDynamicSharedSizeBytes = optin - shared;
        attributes.numBlockBarriers = barriers;
        cudaOccDeviceState state;
        cudaOccResult result;
        cudaOccError status = cudaOccMaxActiveBlocksPerMultiprocessor(&result, &props, &attributes, &state, block,
                                                                      dynamic);
        std::printf("%d %d %u\n", (int)status, result.activeBlocksPerMultiprocessor, result.limitingFactors);
    }
    return 0;
}
