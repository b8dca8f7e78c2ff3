@echo off
rem Boot-time workload (scheduled task, SYSTEM): profile ntoskrnl.exe around a file-system walk,
rem leave the result on the results disk R: (a FAT image the host attaches), power off.
rem Not run here: no Windows image exists on the project's machines. See README.md.
mode COM1 baud=115200 parity=n data=8 stop=1 >nul
echo hvprof: workload starting > COM1
if not exist R:\ (
    echo hvprof: no results disk R: > COM1
    goto :off
)
C:\hvprof\hvprof-agent.exe --info > R:\hvprof-info.txt 2>&1
C:\hvprof\hvprof-agent.exe --module ntoskrnl.exe --bucket 4 --out R:\hvprof-result.txt -- cmd /c dir /s C:\Windows\System32 > R:\hvprof-agent.log 2>&1
echo hvprof: agent exit %ERRORLEVEL% > COM1
C:\hvprof\hvprof-agent.exe --stats >> R:\hvprof-agent.log 2>&1
echo done > R:\done
echo hvprof: workload done > COM1
:off
shutdown /s /t 0
