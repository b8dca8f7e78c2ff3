/*
 * hvprof_probe_and_lock(PMDL Mdl, KPROCESSOR_MODE Mode, LOCK_OPERATION Operation) -> NTSTATUS
 *
 * MmProbeAndLockPages reports a bad user buffer by raising an exception (STATUS_ACCESS_VIOLATION
 * and friends), which a caller must catch with __try/__except. Rust has no SEH and mingw's gcc
 * has no __try, so this function is the __try block, written out as MSVC would compile it:
 *
 *   __try { MmProbeAndLockPages(Mdl, Mode, Operation); } __except (EXCEPTION_EXECUTE_HANDLER)
 *   { return GetExceptionCode(); }  return STATUS_SUCCESS;
 *
 * The unwind info (.pdata/.xdata) names ntoskrnl's own __C_specific_handler as the language
 * handler, with a one-entry scope table: [.Ltry_begin, .Ltry_end) -> filter 1
 * (EXCEPTION_EXECUTE_HANDLER) -> jump to .Lexcept. __C_specific_handler unwinds to .Lexcept with
 * RtlUnwindEx(..., ReturnValue = ExceptionCode), so EAX holds the exception code there. The
 * `nop` after the call keeps the return address (the ControlPc the dispatcher sees for this
 * frame) inside the scope, as MSVC does.
 */
    .text
    .globl  hvprof_probe_and_lock
    .def    hvprof_probe_and_lock; .scl 2; .type 32; .endef
    .seh_proc hvprof_probe_and_lock
hvprof_probe_and_lock:
    subq    $40, %rsp           /* 32 bytes of home space + 8: RSP 16-byte aligned at the call */
    .seh_stackalloc 40
    .seh_endprologue
    .seh_handler __C_specific_handler, @except
    .seh_handlerdata
    .long   1                   /* ScopeTable.Count */
    .rva    .Ltry_begin         /* BeginAddress */
    .rva    .Ltry_end           /* EndAddress */
    .long   1                   /* HandlerAddress: EXCEPTION_EXECUTE_HANDLER */
    .rva    .Lexcept            /* JumpTarget */
    .text
.Ltry_begin:
    call    MmProbeAndLockPages
    nop
.Ltry_end:
    xorl    %eax, %eax          /* STATUS_SUCCESS */
    addq    $40, %rsp
    ret
.Lexcept:
    /* EAX = the exception code (RtlUnwindEx's ReturnValue). */
    addq    $40, %rsp
    ret
    .seh_endproc
