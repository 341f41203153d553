/* Test-only stand-in for bcryptprimitives.dll, which Wine 8 lacks: Rust's std (1.78 and
 * later) imports ProcessPrng from it, so without this DLL beside a Rust .exe the program
 * does not start under Wine (status c0000135). ProcessPrng fills a buffer with random
 * bytes; advapi32's SystemFunction036 (RtlGenRandom) does the same. Built with mingw by
 * scripts/wine-runner; never shipped. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length > 0) {
        ULONG chunk = length > 0x40000000 ? 0x40000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
