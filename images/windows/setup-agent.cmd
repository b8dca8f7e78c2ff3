@echo off
rem One-time install of the hvprof agent (runs at first logon from the config disk).
rem Not run here: no Windows image exists on the project's machines. See README.md.
setlocal
set SRC=%~dp0
echo hvprof: setup-agent starting > COM1
bcdedit /set testsigning on || goto :fail
mkdir C:\hvprof 2>nul
copy /y "%SRC%hvprof-agent.exe" C:\hvprof\ || goto :fail
copy /y "%SRC%workload.cmd" C:\hvprof\ || goto :fail
copy /y "%SRC%hvprof.sys" C:\Windows\System32\drivers\ || goto :fail
rem The driver must be test-signed (docs/windows.md, "Install"); signed files ship on this disk.
if exist "%SRC%hvprof-test.cer" (
    certutil -addstore root "%SRC%hvprof-test.cer"
    certutil -addstore TrustedPublisher "%SRC%hvprof-test.cer"
)
rem PnP install on ACPI\HVPR0001 (used when hvprof's DSDT describes the device) ...
pnputil /add-driver "%SRC%hvprof.inf" /install
rem ... and a service for VMMs without it (the driver then finds the doorbell through CPUID).
sc query hvprof >nul 2>&1 || sc create hvprof type= kernel start= system binPath= System32\drivers\hvprof.sys
schtasks /create /f /tn hvprof-workload /sc onstart /ru SYSTEM /tr C:\hvprof\workload.cmd || goto :fail
echo hvprof: setup-agent done > COM1
shutdown /s /t 5
exit /b 0
:fail
echo hvprof: setup-agent FAILED > COM1
exit /b 1
